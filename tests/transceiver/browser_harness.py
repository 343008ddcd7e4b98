"""One real browser call through the whole stack: headless Chromium or Firefox -> relay ->
transceiver -> echo.

Meant to run INSIDE a fresh network namespace (``unshare --net`` then ``ip link set lo up``;
``test_browser.py`` does that): a browser would otherwise offer and use a non-loopback address of
the machine (docs/transceiver.md). For ``--host ::1`` Chromium's namespace also needs what a
dual-stack host has (a global IPv6 address and a default route), or it gathers no IPv6 loopback
candidate at all; ``test_browser.py`` says why. The harness starts the stack
(``rtcedge up`` by default), then the browser (``--browser chromium``, the default, or
``firefox``) with a fake microphone (Chromium's beeps; Firefox's plays a steady ``TONE_HZ`` sine),
drives the page over the browser's own remote protocol (a small aiohttp WebSocket client for each;
no browser-automation dependency): the Chrome DevTools Protocol for Chromium, WebDriver BiDi for
Firefox (which dropped CDP; BiDi is the W3C protocol it serves on the same kind of socket, where
Marionette would be a second, Mozilla-only wire format). It clicks Talk, waits for the call to
connect, lets audio flow, measures the dominant frequency of the microphone and of the echo
(``tone``), reads ``window.rtcedge.stats()``, clicks Hang up, stops both processes by PID (and
their process groups: renderers, content processes) and prints ONE JSON line to stdout. Progress
goes to stderr. It always exits by itself: every wait is bounded, and a watchdog thread kills the
children and exits if even the cleanup hangs.

    python -m tests.transceiver.browser_harness --http-port 8080 --relay-port 3478 \\
        [--browser firefox] [--stack 'rtcedge up --http {http} --relay {relay}'] \\
        [--screenshot /tmp/page.png]

``--camera`` makes the page offer the fake camera too, as a video app's page does (the
microphone's stream asked with ``video: true``, its video track added to the offer): the
call must still connect, audio-only. The report's ``sdp`` holds the offer and the answer, and
``video`` the connection's video RTP counters.

``--https`` opens the page over https (a stack like ``rtcedge up --https``): the stack prints
its certificate's public-key hash (``--ignore-certificate-errors-spki-list=HASH``) before
``ready``, and Chromium is started with that flag, so it trusts that certificate alone, as a
person does who compared its fingerprint and accepted the warning. ``--refused-first`` first
presses Talk with a wrong token: the offer is refused (401) and the page must offer Talk again
(``refused_first`` in the report) before the real call. ``--no-microphone`` expects a page that
cannot have the microphone (plain http off loopback): it loads the page, presses Talk, and
reports what the page says (``no_microphone``) instead of placing a call. After every hang-up
the report holds what the page shows of the call's end (``ended_text``).

``--repeat N`` then places N - 1 more calls, one after another (Talk, connected, Hang up), and
reports how fast each connected from the page's own marks (``connect_timings``) and the medians
of calls 2..N (``connect_p50_ms``: the first call warms the stack up): POST -> answer,
answer -> ICE connected, -> connected (DTLS), answer -> connected and answer applied ->
connected.

``--migrate`` (with ``--stack 'python -m testbed.fleet --http {http} --relay {relay}'``: a relay,
three transceivers that move calls, and a round-robin front serving the page) scales down the
transceiver carrying the call once audio flows: it finds it by its sessions (each transceiver's
metrics, from the stack's ``stack: {json}`` line), SIGTERMs it by its PID, waits for the page to
move the call (``window.rtcedge.state().migrations``), lets audio flow on the new connection,
then reads the page and the transceivers again and waits for the old one to exit. The report's
``migration`` holds all of it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

from common.config import format_host_port
from testbed.fleet import STACK_LINE
from testbed.processes import metric_value

DEFAULT_STACK = "rtcedge up --http {http} --relay {relay}"
BROWSERS = ("chromium", "firefox")
BUNDLE_POLICIES = ("balanced", "max-bundle", "max-compat")  # RTCBundlePolicy
DEFAULT_CHROMIUM = "/usr/bin/chromium"
DEFAULT_FIREFOX = "/usr/bin/firefox-esr"  # Debian's firefox-esr
# Flags from the machine notes: without the background-networking ones Chromium keeps trying to
# reach Google's hosts through a network that refuses it.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",  # the fake microphone plays a beep tone
    "--autoplay-policy=no-user-gesture-required",
    # The namespace has only lo, and WebRTC leaves loopback out of its network list by default:
    # without this Chromium has no local candidate and ICE never leaves "new". It adds ::1 only
    # when it also has a default local IPv6 address (test_browser.py: DUAL_STACK).
    "--allow-loopback-in-peer-connection",
    "--remote-debugging-port=0",  # the chosen port is written to DevToolsActivePort
    "--window-size=1000,1000",
)
TONE_HZ = 440  # Firefox's fake microphone (media.navigator.audio.fake_frequency; its own: 1000)
# user.js of the throwaway Firefox profile: the prefs must be in place before it starts.
FIREFOX_PREFS: dict[str, bool | int | str] = {
    # Fake devices (dom/media/webrtc/MediaEngineFake.cpp: a sine at fake_frequency, and a
    # colour-cycling camera), granted without a prompt; the echo and Web Audio play unprompted.
    "media.navigator.streams.fake": True,
    "media.navigator.audio.fake_frequency": TONE_HZ,
    "media.navigator.permission.disabled": True,
    # Allowed by default, as if the user had said yes for good: with no stored permission (the
    # prompt is off, so none is stored) nICEr gathers only the default route's address ("use
    # only default local addresses: yes"), which a namespace without a route lacks: no candidate.
    "permissions.default.microphone": 1,
    "permissions.default.camera": 1,
    "media.autoplay.default": 0,
    "media.autoplay.block-webaudio": False,
    # No sound device here: an AudioContext would never leave "suspended" (nor would the
    # harness's analyser run); cubeb's mock context plays to nowhere on a real-time clock.
    "media.cubeb.force_mock_context": True,
    # nICEr leaves loopback interfaces out of gathering unless told: without this the namespace's
    # lo gives no candidate and ICE never starts. Real addresses in candidates, not mDNS names.
    "media.peerconnection.ice.loopback": True,
    "media.peerconnection.ice.obfuscate_host_addresses": False,
    # Nothing of its own to do: no first-run pages, default-browser check, updates, telemetry,
    # experiments or remote settings (the namespace has no route out; quiet logs, less CPU).
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "browser.startup.page": 0,
    "browser.newtabpage.enabled": False,
    "app.update.disabledForTesting": True,
    "app.normandy.enabled": False,
    "messaging-system.rsexperimentloader.enabled": False,
    "services.settings.server": "data:,#remote-settings-dummy/v1",
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.enabled": False,
    "browser.safebrowsing.malware.enabled": False,
    "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False,
    "extensions.update.enabled": False,
    "network.connectivity-service.enabled": False,
    "network.captive-portal-service.enabled": False,
}
READY_LINE = re.compile(r"\bready\b", re.IGNORECASE)  # not "already in use"
SPKI_FLAG = "--ignore-certificate-errors-spki-list"
SPKI_LINE = re.compile(rf"{SPKI_FLAG}=(\S+)")  # what `rtcedge up --https` prints
WRONG_TOKEN = "not-a-token-the-stack-signed"


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    """Everything one run needs, built once from the command line."""

    host: str
    http_port: int
    relay_port: int
    stack_command: list[str]
    chromium: str
    total_timeout_s: float
    ready_timeout_s: float
    connect_timeout_s: float
    audio_s: float
    screenshot: Path | None
    page_query: str = ""  # e.g. "token=..." for a stack that wants a WHIP token
    repeat: int = 1  # calls placed; the ones after the first only measure how fast they connect
    migrate: bool = False  # scale down the call's transceiver; the page must move the call
    page_path: str = "/"  # the page to open (realtime_harness: /realtime)
    chromium_flags: tuple[str, ...] = ()  # after CHROMIUM_FLAGS (e.g. a fake microphone's file)
    browser: str = "chromium"  # one of BROWSERS
    firefox: str = DEFAULT_FIREFOX
    camera: bool = False  # the page offers the fake camera beside the microphone
    bundle_policy: str | None = None  # the page's peer connection's, instead of its own
    https: bool = False  # the page over https, its certificate's key hash from the stack's output
    refused_first: bool = False  # first a Talk with a wrong token: refused, Talk offered again
    no_microphone: bool = False  # a page that cannot have the microphone: what it says, no call

    @property
    def origin(self) -> str:
        scheme = "https" if self.https else "http"
        return f"{scheme}://{format_host_port(self.host, self.http_port)}"

    @property
    def page_url(self) -> str:
        query = f"?{self.page_query}" if self.page_query else ""
        return f"{self.origin}{self.page_path}{query}"


class HarnessError(Exception):
    """A step of the call failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[browser_harness {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Child:
    """A process we started, its output kept in a ring buffer, stoppable by its PID."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, keep_lines: int) -> None:
        self.name = name
        self.proc = proc
        self.lines: collections.deque[str] = collections.deque(maxlen=keep_lines)
        self.ready = asyncio.Event()
        self.leftovers: list[int] = []
        self.info: dict[str, Any] | None = None  # a stack's ``stack: {json}`` line
        self._drain = asyncio.create_task(self._read(proc.stdout))

    @classmethod
    async def start(
        cls, name: str, argv: list[str], keep_lines: int = 40, env: dict[str, str] | None = None
    ) -> Child:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # Its own process group: its helpers (relay workers, renderers) share our child's
                # PID as group id, so a last-resort SIGKILL can reach exactly them.
                start_new_session=True,
            )
        except OSError as exc:
            raise HarnessError(f"cannot start {name} ({argv[0]}): {exc}") from None
        return cls(name, proc, keep_lines)

    async def _read(self, stream: asyncio.StreamReader | None) -> None:
        assert stream is not None
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            self.lines.append(text)
            if text.startswith(STACK_LINE):
                with contextlib.suppress(ValueError):
                    self.info = json.loads(text[len(STACK_LINE) :])
            if READY_LINE.search(text):
                self.ready.set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _live_group_members(self) -> list[int]:
        """PIDs still running in our child's process group (zombies awaiting init don't count)."""
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after ")".
                fields = stat.read_text().rpartition(")")[2].split()
                if int(fields[2]) == self.pid and fields[0] not in ("Z", "X"):
                    members.append(int(stat.parent.name))
        return members

    async def wait_exit(self, timeout_s: float) -> bool:
        """Whether the child exited within the bound.

        Polls the return code instead of ``proc.wait()``: asyncio only wakes ``wait()`` once every
        pipe is closed too, and a helper that inherited stdout would keep it open.
        """
        deadline = time.monotonic() + timeout_s
        while self.proc.returncode is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def stop(self, term_timeout_s: float) -> int | None:
        """SIGTERM the child, SIGKILL its group after the bound, then whatever it left behind.

        ``leftovers`` records helpers that outlived the child: a stack that does not stop its
        own workers on SIGTERM is a bug worth seeing in the report.
        """
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            if not await self.wait_exit(term_timeout_s):
                log(f"{self.name} (pid {self.pid}) ignored SIGTERM for {term_timeout_s} s: SIGKILL")
                self._signal_group(signal.SIGKILL)
                await self.wait_exit(5)
        # Give helpers a moment to follow their parent out before calling them leftovers.
        for _ in range(20):
            self.leftovers = self._live_group_members()
            if not self.leftovers:
                break
            await asyncio.sleep(0.1)
        if self.leftovers:
            log(f"{self.name}: pids {self.leftovers} outlived it (group {self.pid}): SIGKILL")
            self._signal_group(signal.SIGKILL)
        try:
            await asyncio.wait_for(asyncio.shield(self._drain), 2)
        except TimeoutError:
            self._drain.cancel()
        return self.proc.returncode

    def kill_now(self) -> None:
        """For the watchdog thread: no event loop, no waiting."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self._signal_group(signal.SIGKILL)


class Rpc:
    """Commands by id over one WebSocket, each reply matched to its command, events kept.

    The shape the Chrome DevTools Protocol and WebDriver BiDi share: ``{"id", "method",
    "params"}`` out; a reply with the same id (``"error"`` in it when it failed), or an event
    (``"method"``, ``"params"``). Subclasses speak a protocol's page operations over ``call``.
    """

    protocol = "remote protocol"

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.console: collections.deque[str] = collections.deque(maxlen=20)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                future = self._pending.pop(data.get("id", -1), None)
                if future is not None and not future.done():
                    future.set_result(data)
                elif "method" in data:
                    self.event(data["method"], data.get("params", {}))
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(HarnessError(f"{self.protocol} connection closed"))

    def event(self, method: str, params: dict[str, Any]) -> None:
        """An event of the protocol; the subclass keeps the console's."""

    async def call(self, method: str, timeout_s: float = 10, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        await self._ws.send_json({"id": self._next_id, "method": method, "params": params})
        try:
            reply = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise HarnessError(f"{self.protocol} {method} got no reply in {timeout_s} s") from None
        if "error" in reply:
            why = f"{reply['error']}: {reply['message']}" if "message" in reply else reply["error"]
            raise HarnessError(f"{self.protocol} {method} failed: {why}")
        return reply.get("result", {})

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


class Cdp(Rpc):
    """Just enough of the Chrome DevTools Protocol, on one page target."""

    protocol = "DevTools"

    def event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled":
            args = params.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            self.console.append(f"console.{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.console.append(f"exception: {text}")

    async def start(self) -> str:
        """Page and console events on; the browser's version."""
        await self.call("Page.enable")
        await self.call("Runtime.enable")
        with contextlib.suppress(HarnessError):  # for the report only
            return (await self.call("Browser.getVersion")).get("product", "")
        return ""

    async def evaluate(self, expression: str, timeout_s: float = 10) -> Any:
        """Run JavaScript in the page, awaiting a returned promise; the value comes back as JSON."""
        result = await self.call(
            "Runtime.evaluate",
            timeout_s=timeout_s,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise HarnessError(f"page script failed: {expression!r}: {text}")
        return result.get("result", {}).get("value")

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def add_init_script(self, source: str) -> None:
        """``source`` runs in every new document, before the page's own scripts."""
        await self.call("Page.addScriptToEvaluateOnNewDocument", source=source)

    async def screenshot(self) -> bytes:
        return base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"])


class Bidi(Rpc):
    """Just enough of WebDriver BiDi (https://w3c.github.io/webdriver-bidi/), on the first
    browsing context: what Firefox serves at ``ws://HOST:PORT/session``."""

    protocol = "WebDriver BiDi"

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        super().__init__(ws)
        self.context = ""

    def event(self, method: str, params: dict[str, Any]) -> None:
        if method == "log.entryAdded":
            kind = params.get("method") or params.get("type")
            self.console.append(f"{kind}.{params.get('level')}: {params.get('text')}")

    async def start(self) -> str:
        """A session, the console's events, the tab to drive; the browser's version."""
        session = await self.call("session.new", capabilities={})
        await self.call("session.subscribe", events=["log.entryAdded"])
        contexts = (await self.call("browsingContext.getTree")).get("contexts", [])
        if not contexts:
            raise HarnessError("WebDriver BiDi: the browser has no browsing context")
        self.context = contexts[0]["context"]
        caps = session.get("capabilities", {})
        return f"{caps.get('browserName', '')} {caps.get('browserVersion', '')}".strip()

    async def evaluate(self, expression: str, timeout_s: float = 10) -> Any:
        """Run JavaScript in the page, awaiting a returned promise; the value comes back as JSON.

        The value crosses as a JSON string: BiDi's own serialization (typed remote values) would
        need a decoder of its own for what ``JSON.stringify`` already does. ``userActivation``:
        the page's click handlers run as a user's would (autoplay, audio contexts).
        """
        result = await self.call(
            "script.evaluate",
            timeout_s=timeout_s,
            expression=f"(async () => JSON.stringify(await ({expression})))()",
            target={"context": self.context},
            awaitPromise=True,
            resultOwnership="none",
            userActivation=True,
        )
        if result.get("type") == "exception":
            details = result.get("exceptionDetails", {})
            raise HarnessError(f"page script failed: {expression!r}: {details.get('text')}")
        value = result.get("result", {})
        return json.loads(value["value"]) if value.get("type") == "string" else None

    async def navigate(self, url: str) -> None:
        # "complete": the old document is gone before the harness evaluates in the new one.
        await self.call(
            "browsingContext.navigate", timeout_s=15, context=self.context, url=url, wait="complete"
        )

    async def add_init_script(self, source: str) -> None:
        """``source`` runs in every new document, before the page's own scripts."""
        await self.call("script.addPreloadScript", functionDeclaration=f"() => {{ {source} }}")

    async def screenshot(self) -> bytes:
        shot = await self.call("browsingContext.captureScreenshot", context=self.context)
        return base64.b64decode(shot["data"])


async def poll(what: str, check: Any, timeout_s: float, interval_s: float = 0.1) -> Any:
    """Await ``check()`` until it returns something truthy, for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)


def parent_of(pid: int) -> int | None:
    """The parent PID of a running process (/proc), or None."""
    try:
        # "pid (comm) state ppid ...": comm may hold spaces, so split after ")".
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def interfaces() -> list[str]:
    """The namespace's interface names, for the report: where Chromium could have sent from."""
    return sorted(name for _, name in socket.if_nameindex())


# The harness's own instruments, installed before the page's script runs (the page stays what a
# user runs): the microphone's stream and the page's peer connections, which the page keeps to
# itself; and with --camera (__CAMERA__ becomes true) a video app's offer: the stream asked with
# video too, its video track added to the offer.
MEDIA_JS = r"""(() => {
  const h = (window.rtcedgeHarness = { camera: __CAMERA__, microphone: null, peers: [] });
  const devices = navigator.mediaDevices;
  if (devices) {
    const getUserMedia = devices.getUserMedia.bind(devices);
    devices.getUserMedia = async (constraints) => {
      const asked = h.camera && constraints && constraints.audio
        ? { ...constraints, video: true } : constraints;
      const stream = await getUserMedia(asked);
      h.microphone = stream;
      return stream;
    };
  }
  const Native = window.RTCPeerConnection;
  if (!Native) return;
  const proto = Native.prototype;
  if (__BUNDLE_POLICY__) {
    window.RTCPeerConnection = class extends Native {
      constructor(config, ...rest) {
        super({ ...(config || {}), bundlePolicy: __BUNDLE_POLICY__ }, ...rest);
      }
    };
  }
  const keep = (pc) => { if (!h.peers.includes(pc)) h.peers.push(pc); };
  const { addTrack, addTransceiver, createOffer } = proto;
  proto.addTrack = function (...args) { keep(this); return addTrack.apply(this, args); };
  proto.addTransceiver = function (...args) {
    keep(this);
    return addTransceiver.apply(this, args);
  };
  // The camera joins the offer unless the page sent it already (a page that offers video).
  proto.createOffer = function (...args) {
    const stream = h.camera ? h.microphone : null;
    for (const video of stream ? stream.getVideoTracks() : []) {
      if (!this.getSenders().some((s) => s.track === video)) {
        addTransceiver.call(this, video, { direction: "sendrecv", streams: [stream] });
      }
    }
    return createOffer.apply(this, args);
  };
})();"""
TONE_FFT = 8192  # analyser bins of sampleRate / 8192: 5.4 Hz at 44.1 kHz, 5.9 at 48
TONE_MS = 1000  # spectra summed over this long, one every 100 ms
TONE_TIMEOUT_S = 10
# The dominant frequency of the microphone (what the browser sends) and of the echo (what it
# plays back), each from the power spectra of an AnalyserNode (Blackman window) summed over
# TONE_MS: the peak bin's frequency, its level (dBFS, averaged), and the share of all the
# power within 3 bins of it (a pure tone: ~1; noise or silence: far less).
TONE_JS = r"""
(async () => {
  const h = window.rtcedgeHarness;
  const remote = document.getElementById("remote-audio").srcObject;
  const tracks = {
    microphone: h && h.microphone ? h.microphone.getAudioTracks()[0] : null,
    echo: remote ? remote.getAudioTracks()[0] : null,
  };
  const ctx = new AudioContext();
  const out = { sampleRate: ctx.sampleRate, fftSize: __FFT__ };
  try {
    const late = new Promise((_, no) => setTimeout(() => no(new Error("not running")), 3000));
    await Promise.race([ctx.resume(), late]);  // no sound device (Firefox): see FIREFOX_PREFS
    const mute = ctx.createGain();
    mute.gain.value = 0;  // the page's <audio> plays the call; these only listen
    mute.connect(ctx.destination);
    const probes = {};
    for (const [name, track] of Object.entries(tracks)) {
      if (!track) { out[name] = null; continue; }
      const analyser = ctx.createAnalyser();
      analyser.fftSize = __FFT__;
      analyser.smoothingTimeConstant = 0;
      ctx.createMediaStreamSource(new MediaStream([track])).connect(analyser);
      analyser.connect(mute);
      const bins = __FFT__ / 2;
      const db = new Float32Array(bins);
      probes[name] = { analyser, db, power: new Float64Array(bins), reads: 0 };
    }
    const until = performance.now() + __MS__;
    while (performance.now() < until) {
      await new Promise((r) => setTimeout(r, 100));
      for (const p of Object.values(probes)) {
        p.analyser.getFloatFrequencyData(p.db);
        for (let i = 0; i < p.db.length; i++) {
          if (Number.isFinite(p.db[i])) p.power[i] += 10 ** (p.db[i] / 10);
        }
        p.reads++;
      }
    }
    for (const [name, p] of Object.entries(probes)) {
      let peak = 1;  // bin 0 is DC
      for (let i = 1; i < p.power.length; i++) if (p.power[i] > p.power[peak]) peak = i;
      let near = 0, all = 0;
      for (let i = 1; i < p.power.length; i++) {
        all += p.power[i];
        if (Math.abs(i - peak) <= 3) near += p.power[i];
      }
      out[name] = {
        peakHz: Math.round((peak * ctx.sampleRate) / __FFT__ * 10) / 10,
        peakDb: all > 0 ? Math.round(10 * Math.log10(p.power[peak] / p.reads) * 10) / 10 : null,
        toneShare: all > 0 ? Math.round((near / all) * 1000) / 1000 : 0,
        reads: p.reads,
      };
    }
    out.state = ctx.state;
  } catch (e) {
    out.error = `${e.name}: ${e.message}`;
  } finally {
    await ctx.close();
  }
  return out;
})()
""".replace("__FFT__", str(TONE_FFT)).replace("__MS__", str(TONE_MS))
# What the page shows of the last call's end: the line, and the header's backend.
ENDED_TEXT_JS = (
    "({ ended: document.getElementById('ended').hidden ? null"
    " : document.getElementById('ended').textContent,"
    " backend: document.getElementById('backend').textContent })"
)
# The events list as the page shows it: each row's class, type column and text.
EVENTS_SHOWN_JS = (
    "[...document.querySelectorAll('#messages li')].map((li) => ({ className: li.className,"
    " type: (li.querySelector('.type') || {}).textContent || null,"
    " text: (li.querySelector('code') || {}).textContent || null }))"
)
# What the call's peer connection offered and was answered, and what it did with video.
OFFER_JS = r"""
(async () => {
  const pc = window.rtcedgeHarness && window.rtcedgeHarness.peers.at(-1);
  if (!pc) return { sdp: null, video: null };
  const video = { packetsSent: 0, bytesSent: 0, packetsReceived: 0 };
  (await pc.getStats()).forEach((s) => {
    if (s.kind !== "video") return;
    if (s.type === "outbound-rtp") {
      video.packetsSent += s.packetsSent || 0;
      video.bytesSent += s.bytesSent || 0;
    } else if (s.type === "inbound-rtp") {
      video.packetsReceived += s.packetsReceived || 0;
    }
  });
  const sdp = (d) => (d ? d.sdp : null);
  return { sdp: { offer: sdp(pc.localDescription), answer: sdp(pc.remoteDescription) }, video };
})()
"""


class Run:
    """One call, step by step; each step fills ``result`` so that a failure still reports it."""

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config
        self.started = time.monotonic()
        self.stack: Child | None = None
        self.browser: Child | None = None
        self.profile_dir: str | None = None
        self.driver: Cdp | Bidi | None = None
        self.http: aiohttp.ClientSession | None = None
        self.timings_ms: dict[str, int] = {}
        self.extra_chromium_flags: list[str] = []  # learnt from the stack (--https)
        self.result: dict[str, Any] = {
            "ok": False,
            "error": None,
            "connected": False,
            "page": config.page_url,
            "relay": {"address": config.host, "port": config.relay_port},
            "stack_command": config.stack_command,
            "interfaces": interfaces(),
            "timings_ms": self.timings_ms,
        }

    def mark(self, name: str) -> None:
        self.timings_ms[name] = round((time.monotonic() - self.started) * 1000)

    async def start_stack(self) -> None:
        log(f"starting the stack: {shlex.join(self.config.stack_command)}")
        # Room for the transceivers' info lines of a --migrate stack (how sessions ended).
        self.stack = await Child.start("stack", self.config.stack_command, keep_lines=400)
        waiter = asyncio.create_task(self.stack.ready.wait())
        exited = asyncio.create_task(self.stack.wait_exit(self.config.ready_timeout_s))
        await asyncio.wait(
            {waiter, exited},
            timeout=self.config.ready_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        waiter.cancel()
        exited.cancel()
        if not self.stack.ready.is_set():
            if self.stack.proc.returncode is not None:
                await asyncio.sleep(0.2)  # let the drain task read its last words
                said = next((line for line in reversed(self.stack.lines) if line.strip()), "")
                raise HarnessError(
                    f"the stack exited with code {self.stack.proc.returncode}: {said.strip()}"
                )
            raise HarnessError(
                f"the stack printed no 'ready' line in {self.config.ready_timeout_s} s"
            )
        self.mark("stack_ready")
        if self.config.https:
            self.trust_stack_certificate()

    def trust_stack_certificate(self) -> None:
        """--https: Chromium trusts the certificate whose key hash the stack printed."""
        assert self.stack is not None
        if self.config.browser != "chromium":
            raise HarnessError("--https: only Chromium takes a certificate's key hash by flag")
        found = [m[1] for line in self.stack.lines if (m := SPKI_LINE.search(line))]
        if not found:
            raise HarnessError(f"--https: the stack printed no {SPKI_FLAG}=HASH before ready")
        self.result["spki_sha256"] = found[-1]
        self.extra_chromium_flags.append(f"{SPKI_FLAG}={found[-1]}")

    async def start_browser(self) -> None:
        """The browser of ``--browser``, its driver connected, the harness's script installed."""
        if self.config.browser == "firefox":
            await self.start_firefox()
        else:
            await self.start_chromium()
        assert self.driver is not None
        self.result["browser"] = await self.driver.start()
        await self.driver.add_init_script(
            MEDIA_JS.replace("__CAMERA__", json.dumps(self.config.camera)).replace(
                "__BUNDLE_POLICY__", json.dumps(self.config.bundle_policy)
            )
        )
        self.mark("browser_ready")

    async def start_chromium(self) -> None:
        if not (Path(self.config.chromium).is_file() or shutil.which(self.config.chromium)):
            raise HarnessError(f"Chromium not found at {self.config.chromium}")
        self.profile_dir = tempfile.mkdtemp(prefix="rtcedge-chromium-")
        argv = [
            self.config.chromium,
            *CHROMIUM_FLAGS,
            *self.config.chromium_flags,
            *self.extra_chromium_flags,
            f"--user-data-dir={self.profile_dir}",
            "about:blank",
        ]
        log("starting Chromium")
        self.browser = await Child.start("chromium", argv, keep_lines=20)
        port_file = Path(self.profile_dir) / "DevToolsActivePort"

        async def devtools_port() -> int | None:
            self.check_browser_alive()
            with contextlib.suppress(OSError, ValueError, IndexError):
                return int(port_file.read_text().splitlines()[0])
            return None

        port = await poll("Chromium's DevToolsActivePort file", devtools_port, 20)
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

        async def page_ws_url() -> str | None:
            async with self.http.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json()
            pages = [t for t in targets if t.get("type") == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        ws = await self.http.ws_connect(
            await poll("a page target", page_ws_url, 10), max_msg_size=0
        )
        self.driver = Cdp(ws)

    async def start_firefox(self) -> None:
        """Firefox on a throwaway profile (``FIREFOX_PREFS`` in its user.js) and a throwaway
        home (it makes ~/.cache/mozilla and ~/Downloads even with ``--profile``), both removed
        by ``cleanup``; WebDriver BiDi on a port it picks (0) and writes to its profile."""
        if not (Path(self.config.firefox).is_file() or shutil.which(self.config.firefox)):
            raise HarnessError(f"Firefox not found at {self.config.firefox}")
        self.profile_dir = tempfile.mkdtemp(prefix="rtcedge-firefox-")
        profile, home = Path(self.profile_dir) / "profile", Path(self.profile_dir) / "home"
        profile.mkdir()
        home.mkdir()
        (profile / "user.js").write_text(
            "".join(
                f"user_pref({json.dumps(k)}, {json.dumps(v)});\n" for k, v in FIREFOX_PREFS.items()
            )
        )
        argv = [
            self.config.firefox,
            "--headless",
            "--no-remote",
            "--profile",
            str(profile),
            "--remote-debugging-port=0",
            "about:blank",
        ]
        env = {**os.environ, "HOME": str(home), "MOZ_CRASHREPORTER_DISABLE": "1"}
        for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "DISPLAY"):
            env.pop(name, None)
        log("starting Firefox")
        self.browser = await Child.start("firefox", argv, keep_lines=20, env=env)
        server_file = profile / "WebDriverBiDiServer.json"

        async def bidi_address() -> str | None:
            self.check_browser_alive()
            with contextlib.suppress(OSError, ValueError, KeyError):
                server = json.loads(server_file.read_text())  # a half-written file: not yet
                return format_host_port(server["ws_host"], int(server["ws_port"]))
            return None

        address = await poll("Firefox's WebDriverBiDiServer.json", bidi_address, 30)
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        ws = await self.http.ws_connect(f"ws://{address}/session", max_msg_size=0)
        self.driver = Bidi(ws)

    def check_browser_alive(self) -> None:
        if self.browser is not None and self.browser.proc.returncode is not None:
            name = self.config.browser.capitalize()
            raise HarnessError(f"{name} exited with code {self.browser.proc.returncode}")

    async def call(self) -> None:
        driver = self.driver
        assert driver is not None
        log(f"opening {self.config.page_url}")
        await driver.navigate(self.config.page_url)

        async def page_ready() -> bool:
            return await driver.evaluate(
                "document.readyState === 'complete' && typeof window.rtcedge === 'object'"
            )

        await poll("the page and window.rtcedge", page_ready, 10)
        self.mark("page_loaded")
        if self.config.no_microphone:
            await self.without_microphone()
            return
        if self.config.refused_first:
            await self.refused_call()

        log("clicking Talk")
        clicked_at = time.monotonic()
        await driver.evaluate("document.getElementById('talk').click(), true")
        state_js = "window.rtcedge.state()"

        async def settled() -> dict[str, Any] | None:
            state = await driver.evaluate(state_js)
            self.result["state"] = state
            if state["connectionState"] == "connected":
                return state
            if state["connectionState"] in ("failed", "closed") or state.get("error"):
                raise HarnessError(f"the call did not connect: {state}")
            return None

        try:
            await poll("connectionState == 'connected'", settled, self.config.connect_timeout_s)
        finally:
            self.result["connect_ms"] = round((time.monotonic() - clicked_at) * 1000)
        self.result["connected"] = True
        self.mark("connected")
        log(f"connected in {self.result['connect_ms']} ms; letting audio flow")

        # The tone is measured over the last TONE_MS of the audio window.
        await asyncio.sleep(max(0.0, self.config.audio_s - TONE_MS / 1000))
        self.result["tone"] = await driver.evaluate(TONE_JS, TONE_TIMEOUT_S)
        self.result["stats"] = await driver.evaluate("window.rtcedge.stats()")
        self.result["state"] = await driver.evaluate(state_js)
        self.result.update(await driver.evaluate(OFFER_JS))  # "sdp", "video"
        self.result["descriptions"] = await driver.evaluate("window.rtcedge.descriptions()")
        self.result["events_shown"] = await driver.evaluate(EVENTS_SHOWN_JS)
        self.mark("stats_collected")
        if self.config.screenshot is not None:
            await self.screenshot()
        if self.config.migrate:
            await self.migrate()

        log("clicking Hang up")
        await driver.evaluate("document.getElementById('hangup').click(), true")

        async def hung_up() -> dict[str, Any] | None:
            state = await driver.evaluate(state_js)
            return state if state["connectionState"] == "closed" else None

        await poll("connectionState == 'closed'", hung_up, 5)
        # Hang up ends with a DELETE whose failure the page reports as its error.
        await asyncio.sleep(0.5)
        self.result["state_after_hangup"] = await driver.evaluate(state_js)
        self.result["ended_text"] = await driver.evaluate(ENDED_TEXT_JS)
        self.mark("hung_up")
        if self.config.repeat > 1:
            await self.repeat_calls(hung_up)

    async def refused_call(self) -> None:
        """--refused-first: Talk with a wrong token; the offer is refused, and the page must
        end that call by itself and offer Talk again (no Hang up pressed). The token field
        gets its own value back for the real call."""
        driver = self.driver
        assert driver is not None
        log("clicking Talk with a wrong token")
        kept = await driver.evaluate(
            f"(() => {{ const t = document.getElementById('token'); const v = t.value;"
            f" t.value = {json.dumps(WRONG_TOKEN)}; document.getElementById('talk').click();"
            f" return v; }})()"
        )

        async def refused() -> dict[str, Any] | None:
            state = await driver.evaluate("window.rtcedge.state()")
            return state if state.get("error") and state.get("ended") else None

        state = await poll("the refused call to end", refused, 10)
        await asyncio.sleep(0.3)  # nothing after the end may turn Talk off again
        self.result["refused_first"] = {
            "state": await driver.evaluate("window.rtcedge.state()"),
            "talk_disabled": await driver.evaluate("document.getElementById('talk').disabled"),
            "hangup_disabled": await driver.evaluate("document.getElementById('hangup').disabled"),
            "ended_text": await driver.evaluate(ENDED_TEXT_JS),
            "error_at_end": state.get("error"),
        }
        await driver.evaluate(f"document.getElementById('token').value = {json.dumps(kept)}")

    async def without_microphone(self) -> None:
        """--no-microphone: what the page says when it cannot have the microphone, before and
        after Talk is pressed (the page's own handler, even if the button is disabled)."""
        driver = self.driver
        assert driver is not None
        report: dict[str, Any] = {
            "secure_context": await driver.evaluate("window.isSecureContext"),
            "media_devices": await driver.evaluate("typeof navigator.mediaDevices"),
            "talk_disabled": await driver.evaluate("document.getElementById('talk').disabled"),
            "notice_shown": await driver.evaluate("!document.getElementById('notice').hidden"),
        }
        await driver.evaluate("window.rtcedge.talk().then(() => true)")
        await asyncio.sleep(0.3)
        report["notice"] = await driver.evaluate("document.getElementById('notice').textContent")
        report["state"] = await driver.evaluate("window.rtcedge.state()")
        self.result["no_microphone"] = report

    async def transceiver_metrics(self, trx: dict[str, Any]) -> dict[str, float] | None:
        """``MIGRATION_METRICS`` of one transceiver of the stack; None when it does not answer."""
        assert self.http is not None
        try:
            async with self.http.get(
                trx["metrics"] + "/metrics", timeout=aiohttp.ClientTimeout(total=3)
            ) as response:
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
        return {
            key: metric_value(text, name, **labels)
            for key, (name, labels) in MIGRATION_METRICS.items()
        }

    async def migrate(self) -> None:
        """--migrate: SIGTERM the transceiver carrying the call; the page must move the call to
        another one and keep talking. Fills ``result["migration"]``."""
        driver, stack = self.driver, self.stack
        assert driver is not None and stack is not None
        report: dict[str, Any] = {}
        self.result["migration"] = report
        if stack.info is None:
            raise HarnessError(f"--migrate: the stack printed no '{STACK_LINE}{{...}}' line")
        trxs = stack.info["transceivers"]
        before = {t["id"]: await self.transceiver_metrics(t) for t in trxs}
        report["metrics_before"] = before
        carrying = [t for t in trxs if (before[t["id"]] or {}).get("sessions_active") == 1]
        if len(carrying) != 1:
            raise HarnessError(f"--migrate: not exactly one transceiver carries the call: {before}")
        victim = carrying[0]
        report["from"] = victim["id"]
        report["stats_before"] = await driver.evaluate("window.rtcedge.stats()")
        report["location_before"] = (await driver.evaluate("window.rtcedge.state()"))["location"]
        if parent_of(victim["pid"]) != stack.pid:  # ours to stop: the stack's own child
            raise HarnessError(f"--migrate: pid {victim['pid']} is not the stack's child")
        log(f"SIGTERM to transceiver {victim['id']} (pid {victim['pid']}), which has the call")
        os.kill(victim["pid"], signal.SIGTERM)  # the stack reports its exit
        self.mark("scaled_down")

        async def moved() -> dict[str, Any] | None:
            moves = (await driver.evaluate("window.rtcedge.state()")).get("migrations") or []
            return moves[-1] if moves and moves[-1]["outcome"] != "under way" else None

        report["page"] = record = await poll("the page to move its call", moved, MOVE_TIMEOUT_S)
        self.mark("moved")
        if record["outcome"] != "moved":
            raise HarnessError(f"the page did not move its call: {record}")
        log(f"moved in {record.get('ms')} ms; letting audio flow on the new connection")
        report["stats_at_move"] = await driver.evaluate("window.rtcedge.stats()")
        await asyncio.sleep(self.config.audio_s)
        report["stats_after"] = await driver.evaluate("window.rtcedge.stats()")
        report["state_after"] = await driver.evaluate("window.rtcedge.state()")
        others = [t for t in trxs if t is not victim]
        report["metrics_after"] = after = {
            t["id"]: await self.transceiver_metrics(t) for t in others
        }
        report["to"] = [tid for tid, m in after.items() if m and m["sessions_active"] == 1]
        # The old transceiver ends the old session (the page's DELETE) and then exits; how the
        # session ended is in its info lines (its metrics go with it).
        exit_line = f"transceiver {victim['id']} (pid {victim['pid']}) exited"

        async def old_exit() -> str | None:
            return next((line for line in stack.lines if exit_line in line), None)

        report["old_exit"] = await poll(f"transceiver {victim['id']} to exit", old_exit, 15)
        report["old_session_ended"] = [
            line for line in stack.lines if f"[{victim['pid']}]" in line and " ending: " in line
        ]
        self.mark("old_exited")

    async def repeat_calls(self, hung_up: Any) -> None:
        """``repeat - 1`` more calls, each connected then hung up; their marks, and medians."""
        driver = self.driver
        assert driver is not None
        timings = [(self.result.get("stats") or {}).get("timings", {})]
        self.result["connect_timings"] = timings

        async def connected() -> dict[str, Any] | None:
            state = await driver.evaluate("window.rtcedge.state()")
            if state["connectionState"] in ("failed", "closed") or state.get("error"):
                raise HarnessError(f"repeated call did not connect: {state}")
            if state["connectionState"] != "connected":
                return None
            stats = await driver.evaluate("window.rtcedge.stats()")
            return stats["timings"] if "connectedMs" in stats["timings"] else None

        talked_at = 0.0
        for i in range(2, self.config.repeat + 1):
            # One call a second at most: the stack's default quota per client (1/s after a
            # burst of 10) would refuse more.
            await asyncio.sleep(max(0.0, talked_at + CALL_INTERVAL_S - time.monotonic()))
            talked_at = time.monotonic()
            await driver.evaluate("document.getElementById('talk').click(), true")
            timings.append(await poll(f"call {i} connected", connected, 20, 0.05))
            await driver.evaluate("document.getElementById('hangup').click(), true")
            await poll(f"call {i} closed", hung_up, 5, 0.05)
        self.result["connect_p50_ms"] = connect_medians(timings[1:])
        log(f"{self.config.repeat} calls; medians of calls 2..: {self.result['connect_p50_ms']}")

    async def screenshot(self) -> None:
        assert self.driver is not None and self.config.screenshot is not None
        self.config.screenshot.write_bytes(await self.driver.screenshot())
        self.result["screenshot"] = str(self.config.screenshot)

    async def diagnose(self) -> None:
        """After a failure: whatever the page can still tell, without letting it fail us again."""
        if self.driver is None:
            return
        with contextlib.suppress(Exception):
            self.result["state"] = await self.driver.evaluate("window.rtcedge.state()", 3)
            self.result["stats"] = await self.driver.evaluate("window.rtcedge.stats()", 3)
        if self.config.screenshot is not None and "screenshot" not in self.result:
            with contextlib.suppress(Exception):
                await self.screenshot()

    async def cleanup(self) -> None:
        if self.driver is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.driver.close(), 3)
        if self.http is not None:
            await self.http.close()
        if self.browser is not None:
            self.result["browser_exit"] = await self.browser.stop(term_timeout_s=5)
            self.result["browser_output"] = list(self.browser.lines)
            self.result["browser_leftovers"] = self.browser.leftovers
        if self.profile_dir is not None:
            shutil.rmtree(self.profile_dir, ignore_errors=True)
        if self.stack is not None:
            self.result["stack_exit"] = await self.stack.stop(term_timeout_s=10)
            self.result["stack_output"] = list(self.stack.lines)
            self.result["stack_leftovers"] = self.stack.leftovers


MOVE_TIMEOUT_S = 15  # SIGTERM -> the page's move settled (a stack's deadline is below)
MIGRATION_METRICS = {  # what the migration report reads from each transceiver
    "sessions_active": ("rtcedge_transceiver_sessions_active", {}),
    "offered": ("rtcedge_transceiver_migrations_offered_total", {}),
    "claimed": ("rtcedge_transceiver_migrations_claimed_total", {}),
    "resumed": ("rtcedge_transceiver_migrations_resumed_total", {}),
    "completed": ("rtcedge_transceiver_migrations_completed_total", {}),
    "failed": ("rtcedge_transceiver_migrations_failed_total", {}),
    "ended_migrated": ("rtcedge_transceiver_sessions_ended_total", {"reason": "migrated"}),
    "frames_in": ("rtcedge_transceiver_audio_frames_total", {"direction": "in"}),
    "frames_out": ("rtcedge_transceiver_audio_frames_total", {"direction": "out"}),
}
CALL_INTERVAL_S = 1.05  # between the repeated calls' Talk clicks
CONNECT_STEPS = {  # name: (from mark, to mark), the page's timings (transceiver/static/app.js)
    "post_to_answer": ("postMs", "answerMs"),
    "answer_to_ice": ("answerMs", "iceConnectedMs"),
    "ice_to_connected": ("iceConnectedMs", "connectedMs"),
    "answer_to_connected": ("answerMs", "connectedMs"),
    "applied_to_connected": ("answerAppliedMs", "connectedMs"),
}


def connect_medians(timings: list[dict[str, float]]) -> dict[str, float | None]:
    """Median ms of each connect step over calls, from the page's marks (None: no call had
    both)."""
    out: dict[str, float | None] = {}
    for step, (start, end) in CONNECT_STEPS.items():
        values = [t[end] - t[start] for t in timings if start in t and end in t]
        out[step] = round(statistics.median(values), 1) if values else None
    out["calls"] = len(timings)
    return out


async def run(config: HarnessConfig, harness: Run) -> dict[str, Any]:
    # SIGTERM/SIGINT cancel the steps but not the cleanup: the children must not outlive us.
    # A second signal finds the default action again and ends the harness at once.
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def interrupted(sig: signal.Signals) -> None:
        harness.result["error"] = f"stopped by {sig.name}"
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, interrupted, sig)
    try:
        await asyncio.wait_for(harness_steps(harness), config.total_timeout_s)
    except asyncio.CancelledError:
        task.uncancel()
    except TimeoutError:
        harness.result["error"] = f"the whole run took more than {config.total_timeout_s} s"
    except HarnessError as exc:
        harness.result["error"] = str(exc)
    except Exception as exc:  # report anything, still clean up and print the line
        harness.result["error"] = f"{type(exc).__name__}: {exc}"
    if harness.result["error"]:
        log(f"failed: {harness.result['error']}")
        await harness.diagnose()
    if harness.driver is not None:
        harness.result["console"] = list(harness.driver.console)
    await harness.cleanup()
    harness.mark("total")
    harness.result["ok"] = harness.result["error"] is None
    return harness.result


async def harness_steps(harness: Run) -> None:
    await harness.start_stack()
    await harness.start_browser()
    await harness.call()


def parse_args(argv: list[str] | None = None) -> HarnessConfig:
    return config_from(arguments().parse_args(argv))


def arguments(description: str | None = None) -> argparse.ArgumentParser:
    """The command line every harness shares (realtime_harness adds its own options)."""
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    parser.add_argument(
        "--host", default="127.0.0.1", help="address for HTTP and the relay (IPv4 or IPv6)"
    )
    parser.add_argument("--http-port", type=int, default=8080)
    parser.add_argument("--relay-port", type=int, default=3478)
    parser.add_argument(
        "--stack",
        default=os.environ.get("RTCEDGE_BROWSER_STACK", DEFAULT_STACK),
        help="command starting the stack; {http} and {relay} become HOST:PORT "
        "(default: $RTCEDGE_BROWSER_STACK or %(default)r)",
    )
    parser.add_argument("--browser", choices=BROWSERS, default="chromium", help="which to drive")
    parser.add_argument("--chromium", default=DEFAULT_CHROMIUM, help="Chromium's binary")
    parser.add_argument("--firefox", default=DEFAULT_FIREFOX, help="Firefox's binary")
    parser.add_argument(
        "--camera",
        action="store_true",
        help="the page offers the fake camera too (audio + video); the call must be audio-only",
    )
    parser.add_argument(
        "--bundle-policy",
        choices=BUNDLE_POLICIES,
        default=None,
        help="the page's RTCPeerConnection bundlePolicy instead of its own (max-bundle)",
    )
    parser.add_argument("--timeout", type=float, default=60, help="bound on the whole run, s")
    parser.add_argument("--ready-timeout", type=float, default=20, help="stack start bound, s")
    parser.add_argument("--connect-timeout", type=float, default=20, help="Talk -> connected, s")
    parser.add_argument("--audio-seconds", type=float, default=3, help="audio before stats, s")
    parser.add_argument("--screenshot", type=Path, default=None, help="PNG of the connected page")
    parser.add_argument("--page-query", default="", help="query string of the page's address")
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="scale down the call's transceiver once audio flows; the page must move the call "
        "(a stack like testbed.fleet: several transceivers, a 'stack: {json}' line)",
    )
    parser.add_argument(
        "--https",
        action="store_true",
        help="open the page over https; Chromium trusts the certificate whose key hash the "
        f"stack prints ({SPKI_FLAG}=HASH, as `rtcedge up --https` does)",
    )
    parser.add_argument(
        "--refused-first",
        action="store_true",
        help="first press Talk with a wrong token: refused, the page must offer Talk again",
    )
    parser.add_argument(
        "--no-microphone",
        action="store_true",
        help="the page cannot have the microphone (plain http off loopback): report what it "
        "says, place no call",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="calls to place; after the first, each only connects and hangs up (connect times)",
    )
    return parser


def config_from(args: argparse.Namespace) -> HarnessConfig:
    http = format_host_port(args.host, args.http_port)
    relay = format_host_port(args.host, args.relay_port)
    return HarnessConfig(
        host=args.host,
        http_port=args.http_port,
        relay_port=args.relay_port,
        stack_command=[
            part.replace("{http}", http).replace("{relay}", relay)
            for part in shlex.split(args.stack)
        ],
        chromium=args.chromium,
        browser=args.browser,
        firefox=args.firefox,
        camera=args.camera,
        bundle_policy=args.bundle_policy,
        total_timeout_s=args.timeout,
        ready_timeout_s=args.ready_timeout,
        connect_timeout_s=args.connect_timeout,
        audio_s=args.audio_seconds,
        screenshot=args.screenshot,
        page_query=args.page_query,
        repeat=max(1, args.repeat),
        migrate=args.migrate,
        https=args.https,
        refused_first=args.refused_first,
        no_microphone=args.no_microphone,
    )


def main(argv: list[str] | None = None) -> int:
    return report(Run(parse_args(argv)))


def report(harness: Run) -> int:
    """Run ``harness`` under its bounds and a watchdog; print its ONE JSON line; exit status."""
    config = harness.config

    def watchdog() -> None:
        # Only if the bounded cleanup itself hangs: kill what we started and leave.
        for child in (harness.browser, harness.stack):
            if child is not None:
                child.kill_now()
        harness.result["error"] = "watchdog: the harness did not finish; children killed"
        print(json.dumps(harness.result, default=str), flush=True)
        os._exit(2)

    timer = threading.Timer(config.total_timeout_s + 30, watchdog)
    timer.daemon = True
    timer.start()
    try:
        result = asyncio.run(run(config, harness))
    except BaseException as exc:  # a bug here must still end in the one JSON line
        for child in (harness.browser, harness.stack):
            if child is not None:
                child.kill_now()
        reason = f"harness crashed: {type(exc).__name__}: {exc}"
        result = {**harness.result, "ok": False, "error": reason}
    timer.cancel()
    print(json.dumps(result, default=str), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
