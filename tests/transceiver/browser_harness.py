"""One real browser call through the whole stack: headless Chromium -> relay -> transceiver -> echo.

Meant to run INSIDE a fresh network namespace (``unshare --net`` then ``ip link set lo up``;
``test_browser.py`` does that): Chromium would otherwise offer and use a non-loopback address of
the machine (docs/transceiver.md). For ``--host ::1`` the namespace also needs what a dual-stack
host has (a global IPv6 address and a default route), or Chromium gathers no IPv6 loopback
candidate at all; ``test_browser.py`` says why. The harness starts the stack
(``rtcedge up`` by default), then Chromium with a fake microphone that plays a beep, drives the page
over the Chrome DevTools Protocol (a small aiohttp WebSocket client; no browser-automation
dependency), clicks Talk, waits for the call to connect, lets audio flow, reads
``window.rtcedge.stats()``, clicks Hang up, stops both processes by PID and prints ONE JSON line to
stdout. Progress goes to stderr. It always exits by itself: every wait is bounded, and a watchdog
thread kills the children and exits if even the cleanup hangs.

    python -m tests.transceiver.browser_harness --http-port 8080 --relay-port 3478 \\
        [--stack 'rtcedge up --http {http} --relay {relay}'] [--screenshot /tmp/page.png]

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
DEFAULT_CHROMIUM = "/usr/bin/chromium"
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
READY_LINE = re.compile(r"\bready\b", re.IGNORECASE)  # not "already in use"


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

    @property
    def origin(self) -> str:
        return f"http://{format_host_port(self.host, self.http_port)}"

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
    async def start(cls, name: str, argv: list[str], keep_lines: int = 40) -> Child:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
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


class Cdp:
    """Just enough of the Chrome DevTools Protocol: commands by id, and a few events kept."""

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
                elif data.get("method") == "Runtime.consoleAPICalled":
                    args = data["params"].get("args", [])
                    text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
                    self.console.append(f"console.{data['params'].get('type')}: {text}")
                elif data.get("method") == "Runtime.exceptionThrown":
                    details = data["params"].get("exceptionDetails", {})
                    text = details.get("exception", {}).get("description") or details.get("text")
                    self.console.append(f"exception: {text}")
        finally:
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(HarnessError("DevTools connection closed"))

    async def call(self, method: str, timeout_s: float = 10, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        await self._ws.send_json({"id": self._next_id, "method": method, "params": params})
        try:
            reply = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise HarnessError(f"DevTools {method} got no reply in {timeout_s} s") from None
        if "error" in reply:
            raise HarnessError(f"DevTools {method} failed: {reply['error']}")
        return reply.get("result", {})

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

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


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


class Run:
    """One call, step by step; each step fills ``result`` so that a failure still reports it."""

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config
        self.started = time.monotonic()
        self.stack: Child | None = None
        self.chromium: Child | None = None
        self.profile_dir: str | None = None
        self.cdp: Cdp | None = None
        self.http: aiohttp.ClientSession | None = None
        self.timings_ms: dict[str, int] = {}
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

    async def start_chromium(self) -> None:
        if not (Path(self.config.chromium).is_file() or shutil.which(self.config.chromium)):
            raise HarnessError(f"Chromium not found at {self.config.chromium}")
        self.profile_dir = tempfile.mkdtemp(prefix="rtcedge-chromium-")
        argv = [
            self.config.chromium,
            *CHROMIUM_FLAGS,
            *self.config.chromium_flags,
            f"--user-data-dir={self.profile_dir}",
            "about:blank",
        ]
        log("starting Chromium")
        self.chromium = await Child.start("chromium", argv, keep_lines=20)
        port_file = Path(self.profile_dir) / "DevToolsActivePort"

        async def devtools_port() -> int | None:
            if self.chromium is not None and self.chromium.proc.returncode is not None:
                raise HarnessError(f"Chromium exited with code {self.chromium.proc.returncode}")
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
        self.cdp = Cdp(ws)
        await self.cdp.call("Page.enable")
        await self.cdp.call("Runtime.enable")
        self.mark("browser_ready")

    async def call(self) -> None:
        cdp = self.cdp
        assert cdp is not None
        log(f"opening {self.config.page_url}")
        await cdp.call("Page.navigate", url=self.config.page_url)

        async def page_ready() -> bool:
            return await cdp.evaluate(
                "document.readyState === 'complete' && typeof window.rtcedge === 'object'"
            )

        await poll("the page and window.rtcedge", page_ready, 10)
        self.mark("page_loaded")

        log("clicking Talk")
        clicked_at = time.monotonic()
        await cdp.evaluate("document.getElementById('talk').click(), true")
        state_js = "window.rtcedge.state()"

        async def settled() -> dict[str, Any] | None:
            state = await cdp.evaluate(state_js)
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

        await asyncio.sleep(self.config.audio_s)
        self.result["stats"] = await cdp.evaluate("window.rtcedge.stats()")
        self.result["state"] = await cdp.evaluate(state_js)
        self.result["descriptions"] = await cdp.evaluate("window.rtcedge.descriptions()")
        self.mark("stats_collected")
        if self.config.screenshot is not None:
            await self.screenshot()
        if self.config.migrate:
            await self.migrate()

        log("clicking Hang up")
        await cdp.evaluate("document.getElementById('hangup').click(), true")

        async def hung_up() -> dict[str, Any] | None:
            state = await cdp.evaluate(state_js)
            return state if state["connectionState"] == "closed" else None

        await poll("connectionState == 'closed'", hung_up, 5)
        # Hang up ends with a DELETE whose failure the page reports as its error.
        await asyncio.sleep(0.5)
        self.result["state_after_hangup"] = await cdp.evaluate(state_js)
        self.mark("hung_up")
        if self.config.repeat > 1:
            await self.repeat_calls(hung_up)

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
        cdp, stack = self.cdp, self.stack
        assert cdp is not None and stack is not None
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
        report["stats_before"] = await cdp.evaluate("window.rtcedge.stats()")
        report["location_before"] = (await cdp.evaluate("window.rtcedge.state()"))["location"]
        if parent_of(victim["pid"]) != stack.pid:  # ours to stop: the stack's own child
            raise HarnessError(f"--migrate: pid {victim['pid']} is not the stack's child")
        log(f"SIGTERM to transceiver {victim['id']} (pid {victim['pid']}), which has the call")
        os.kill(victim["pid"], signal.SIGTERM)  # the stack reports its exit
        self.mark("scaled_down")

        async def moved() -> dict[str, Any] | None:
            moves = (await cdp.evaluate("window.rtcedge.state()")).get("migrations") or []
            return moves[-1] if moves and moves[-1]["outcome"] != "under way" else None

        report["page"] = record = await poll("the page to move its call", moved, MOVE_TIMEOUT_S)
        self.mark("moved")
        if record["outcome"] != "moved":
            raise HarnessError(f"the page did not move its call: {record}")
        log(f"moved in {record.get('ms')} ms; letting audio flow on the new connection")
        report["stats_at_move"] = await cdp.evaluate("window.rtcedge.stats()")
        await asyncio.sleep(self.config.audio_s)
        report["stats_after"] = await cdp.evaluate("window.rtcedge.stats()")
        report["state_after"] = await cdp.evaluate("window.rtcedge.state()")
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
        cdp = self.cdp
        assert cdp is not None
        timings = [(self.result.get("stats") or {}).get("timings", {})]
        self.result["connect_timings"] = timings

        async def connected() -> dict[str, Any] | None:
            state = await cdp.evaluate("window.rtcedge.state()")
            if state["connectionState"] in ("failed", "closed") or state.get("error"):
                raise HarnessError(f"repeated call did not connect: {state}")
            if state["connectionState"] != "connected":
                return None
            stats = await cdp.evaluate("window.rtcedge.stats()")
            return stats["timings"] if "connectedMs" in stats["timings"] else None

        talked_at = 0.0
        for i in range(2, self.config.repeat + 1):
            # One call a second at most: the stack's default quota per client (1/s after a
            # burst of 10) would refuse more.
            await asyncio.sleep(max(0.0, talked_at + CALL_INTERVAL_S - time.monotonic()))
            talked_at = time.monotonic()
            await cdp.evaluate("document.getElementById('talk').click(), true")
            timings.append(await poll(f"call {i} connected", connected, 20, 0.05))
            await cdp.evaluate("document.getElementById('hangup').click(), true")
            await poll(f"call {i} closed", hung_up, 5, 0.05)
        self.result["connect_p50_ms"] = connect_medians(timings[1:])
        log(f"{self.config.repeat} calls; medians of calls 2..: {self.result['connect_p50_ms']}")

    async def screenshot(self) -> None:
        assert self.cdp is not None and self.config.screenshot is not None
        shot = await self.cdp.call("Page.captureScreenshot", format="png")
        self.config.screenshot.write_bytes(base64.b64decode(shot["data"]))
        self.result["screenshot"] = str(self.config.screenshot)

    async def diagnose(self) -> None:
        """After a failure: whatever the page can still tell, without letting it fail us again."""
        if self.cdp is None:
            return
        with contextlib.suppress(Exception):
            self.result["state"] = await self.cdp.evaluate("window.rtcedge.state()", 3)
            self.result["stats"] = await self.cdp.evaluate("window.rtcedge.stats()", 3)
        if self.config.screenshot is not None and "screenshot" not in self.result:
            with contextlib.suppress(Exception):
                await self.screenshot()

    async def cleanup(self) -> None:
        if self.cdp is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.cdp.close(), 3)
        if self.http is not None:
            await self.http.close()
        if self.chromium is not None:
            self.result["chromium_exit"] = await self.chromium.stop(term_timeout_s=5)
            self.result["chromium_output"] = list(self.chromium.lines)
            self.result["chromium_leftovers"] = self.chromium.leftovers
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
    if harness.cdp is not None:
        harness.result["console"] = list(harness.cdp.console)
    await harness.cleanup()
    harness.mark("total")
    harness.result["ok"] = harness.result["error"] is None
    return harness.result


async def harness_steps(harness: Run) -> None:
    await harness.start_stack()
    await harness.start_chromium()
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
    parser.add_argument("--chromium", default=DEFAULT_CHROMIUM)
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
        total_timeout_s=args.timeout,
        ready_timeout_s=args.ready_timeout,
        connect_timeout_s=args.connect_timeout,
        audio_s=args.audio_seconds,
        screenshot=args.screenshot,
        page_query=args.page_query,
        repeat=max(1, args.repeat),
        migrate=args.migrate,
    )


def main(argv: list[str] | None = None) -> int:
    return report(Run(parse_args(argv)))


def report(harness: Run) -> int:
    """Run ``harness`` under its bounds and a watchdog; print its ONE JSON line; exit status."""
    config = harness.config

    def watchdog() -> None:
        # Only if the bounded cleanup itself hangs: kill what we started and leave.
        for child in (harness.chromium, harness.stack):
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
        for child in (harness.chromium, harness.stack):
            if child is not None:
                child.kill_now()
        reason = f"harness crashed: {type(exc).__name__}: {exc}"
        result = {**harness.result, "ok": False, "error": reason}
    timer.cancel()
    print(json.dumps(result, default=str), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
