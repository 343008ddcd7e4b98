"""Janus Gateway's EchoTest as a peer to measure rtcedge against: the server in a child process
with a configuration of our own, and the caller's end of its HTTP API.

- ``write_config`` writes what ``janus`` reads (``janus.jcfg``, the HTTP transport's, the
  EchoTest's) into a folder of its own, with a plugins and a transports folder that hold only
  the EchoTest and the HTTP transport (links to the installed ones): nothing else is loaded,
  no event handler, no logger, no admin API, no WebSocket.
- ``JanusProcess`` runs ``janus`` with it inside a ``testbed.netns.VethNamespace`` (Janus
  skips loopback when it gathers ICE candidates, so it listens on the namespace's end of the
  veth pair: HTTP there, and its one host candidate). Stopped by PID; it dies with its parent.
- ``JanusEchoTest`` is one caller's session on it: create a session, attach
  ``janus.plugin.echotest``, send ``{"audio": true}`` with the JSEP offer (no trickle: aiortc's
  offer holds every candidate), poll the session's events for the answer (Janus half-trickles:
  its candidates are in the answer), keep the session alive, destroy it to hang up. The
  requests and the reading of replies are plain functions (``request``, ``answer_sdp``,
  ``check_reply``); the class is the thin aiohttp loop around them.

Janus's event loops: by default (``event_loops = 0``) every handle gets a thread of its own
running a GLib loop for its media; ``event_loops = N`` makes N shared loops at start-up instead
(``janus.jcfg``, "event_loops"). The benchmark states which it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import itertools
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.lifetime import parent_death_preexec
from testbed.netns import VethNamespace

ECHOTEST = "janus.plugin.echotest"
HTTP_PORT = 8088  # in the namespace of its own: nothing else listens there
KEEPALIVE_S = 25.0  # janus.js's; a session without a request for session_timeout (60 s) ends
DEBUG_LEVEL = 3  # warnings and errors: no per-call info lines in the measured window
LIBRARY_DIRS = (
    "/usr/lib/*/janus",
    "/usr/lib/janus",
    "/usr/local/lib/janus",
    "/opt/janus/lib/janus",
)
INSTALL_HINT = "install it: apt-get install janus (Debian/Ubuntu)"


class JanusError(RuntimeError):
    """Janus answered with an error, or not at all: the message names the request."""


# -- the server ------------------------------------------------------------------------------------
def library_dir() -> Path:
    """Where the installed Janus keeps its plugins and transports (Debian: /usr/lib/ARCH/janus)."""
    for pattern in LIBRARY_DIRS:
        for found in sorted(glob.glob(pattern)):
            if (Path(found) / "plugins" / "libjanus_echotest.so").exists():
                return Path(found)
    raise JanusError(f"Janus's EchoTest plugin (libjanus_echotest.so) not found; {INSTALL_HINT}")


def janus_missing() -> str:
    """Why Janus cannot run here ('' if it can): the tests' skip reason, the benchmark's error."""
    if shutil.which("janus") is None:
        return f"janus is not on PATH; {INSTALL_HINT}"
    try:
        library_dir()
    except JanusError as exc:
        return str(exc)
    return ""


def config_text(address: str, event_loops: int, folder: Path) -> dict[str, str]:
    """The configuration files by name: the core, the HTTP transport on ``address`` only, the
    EchoTest with its events off. Pure (the folder is only named)."""
    loops = f"\tevent_loops = {event_loops}\n" if event_loops > 0 else ""
    return {
        "janus.jcfg": (
            "general: {\n"
            f'\tconfigs_folder = "{folder}"\n'
            f'\tplugins_folder = "{folder}/plugins"\n'
            f'\ttransports_folder = "{folder}/transports"\n'
            f'\tevents_folder = "{folder}/events"\n'
            f'\tloggers_folder = "{folder}/loggers"\n'
            f"\tdebug_level = {DEBUG_LEVEL}\n"
            '\tserver_name = "rtcedge-bench"\n'
            f'\tinterface = "{address}"\n'  # the SDP's address (no default route to find it)
            "\tsession_timeout = 60\n"
            f"{loops}"
            "}\n"
            "certificates: {\n}\n"  # none given: Janus makes its own (ECDSA P-256)
            "media: {\n\tno_media_timer = 0\n}\n"  # no "media stopped" events
            # Candidates on the veth only; .local candidates dropped (ours are plain IPs).
            f'nat: {{\n\tnice_debug = false\n\tice_enforce_list = "{address}"\n'
            "\tignore_mdns = true\n}\n"
            "plugins: {\n}\ntransports: {\n}\nloggers: {\n}\nevents: {\n\tbroadcast = false\n}\n"
        ),
        "janus.transport.http.jcfg": (
            "general: {\n"
            '\tjson = "compact"\n\tbase_path = "/janus"\n'
            f"\thttp = true\n\tport = {HTTP_PORT}\n"
            f'\tip = "{address}"\n\thttps = false\n'
            "}\n"
            "admin: {\n\tadmin_http = false\n\tadmin_https = false\n}\n"
        ),
        "janus.plugin.echotest.jcfg": "general: {\n\tevents = false\n}\n",
    }


def write_config(folder: Path, address: str, event_loops: int = 0) -> Path:
    """The configuration folder (``config_text``) with its plugins and transports folders
    holding links to the EchoTest and the HTTP transport only; the path of ``janus.jcfg``."""
    lib = library_dir()
    for sub in ("plugins", "transports", "events", "loggers"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for sub, name in (("plugins", "libjanus_echotest.so"), ("transports", "libjanus_http.so")):
        link = folder / sub / name
        if not link.exists():
            link.symlink_to((lib / sub / name).resolve())
    for name, text in config_text(address, event_loops, folder).items():
        (folder / name).write_text(text)
    return folder / "janus.jcfg"


@dataclass
class JanusProcess:
    """``janus`` in a child process inside ``namespace``, configured in ``folder``; its HTTP API
    at ``url``. The CPU affinity it starts with is its creator's: start it from the core it is
    to run on (``bench/peer.py``), every thread it starts later inherits it."""

    namespace: VethNamespace
    folder: Path
    event_loops: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.folder / "janus.log"

    @property
    def url(self) -> str:
        return f"http://{self.namespace.peer_address}:{HTTP_PORT}/janus"

    def command(self) -> list[str]:
        config = write_config(self.folder, self.namespace.peer_address, self.event_loops)
        janus = [
            shutil.which("janus") or "janus",
            f"--config={config}",
            f"--configs-folder={self.folder}",
            f"--log-file={self.log_path}",
            "--disable-stdout",
            "--disable-colors",
        ]
        return self.namespace.exec_command(janus)

    def start(self, timeout_s: float = 15.0) -> JanusProcess:
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=parent_death_preexec(),  # kept across ip's exec of janus
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise JanusError(f"janus exited ({self.proc.returncode}): {self.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                if self.info().get("janus") == "server_info":
                    return self
            time.sleep(0.05)
        self.stop()
        raise JanusError(f"janus did not answer {self.url}/info in {timeout_s:.0f} s")

    def info(self) -> dict[str, Any]:
        """GET /janus/info: the server's version and plugins."""
        with urllib.request.urlopen(f"{self.url}/info", timeout=2) as resp:
            return json.loads(resp.read())

    def log_tail(self, chars: int = 1500) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:].strip()
        return "(no log)"

    def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)  # Janus tears its sessions down and exits
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> JanusProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the Janus API, as plain functions -------------------------------------------------------------
_transactions = itertools.count(1)


def request(kind: str, **fields: Any) -> dict[str, Any]:
    """A Janus API request (``{"janus": kind, "transaction": ...}`` and ``fields``)."""
    return {"janus": kind, "transaction": f"t{next(_transactions)}", **fields}


def check_reply(reply: Any, sent: dict[str, Any], expect: str = "success") -> dict[str, Any]:
    """``reply`` to ``sent`` if it is ``expect`` ("success", or "ack" for a plugin message);
    else JanusError naming the request and Janus's reason."""
    if not isinstance(reply, dict):
        raise JanusError(f"{sent['janus']}: not a JSON object: {str(reply)[:200]}")
    kind = reply.get("janus")
    if kind == "error":
        error = reply.get("error") or {}
        raise JanusError(f"{sent['janus']}: error {error.get('code')}: {error.get('reason')}")
    if kind != expect:
        raise JanusError(f"{sent['janus']}: {kind!r} instead of {expect!r}")
    if reply.get("transaction") != sent["transaction"]:
        raise JanusError(f"{sent['janus']}: the reply is to another transaction")
    return reply


def created_id(reply: dict[str, Any], sent: dict[str, Any]) -> int:
    """The session's or handle's id in the reply to ``create`` or ``attach``."""
    data = check_reply(reply, sent).get("data") or {}
    if not isinstance(data.get("id"), int):
        raise JanusError(f"{sent['janus']}: no id in {json.dumps(reply)[:200]}")
    return data["id"]


def answer_sdp(events: Any, handle_id: int) -> str | None:
    """The SDP answer among a long poll's ``events`` (one event or a list) from ``handle_id``;
    None if not there yet. A plugin's error for the handle raises JanusError."""
    for event in events if isinstance(events, list) else [events]:
        if not isinstance(event, dict) or event.get("sender") != handle_id:
            continue
        data = (event.get("plugindata") or {}).get("data") or {}
        if "error" in data:
            raise JanusError(f"echotest: error {data.get('error_code')}: {data['error']}")
        if event.get("janus") == "hangup":
            raise JanusError(f"echotest: hung up: {event.get('reason')}")
        jsep = event.get("jsep") or {}
        if jsep.get("type") == "answer" and isinstance(jsep.get("sdp"), str):
            return jsep["sdp"]
    return None


# -- one caller's EchoTest session, over HTTP ------------------------------------------------------
class JanusEchoTest:
    """One call's session on a Janus server's HTTP API (``url``: ``http://HOST:PORT/janus``),
    with an aiohttp ``ClientSession`` the caller owns."""

    def __init__(self, http: Any, url: str) -> None:
        self.http = http
        self.url = url.rstrip("/")
        self.session_id: int | None = None
        self.handle_id: int | None = None
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def location(self) -> str:
        """The handle's path (what a WHIP resource is for a WHIP call)."""
        return f"/janus/{self.session_id}/{self.handle_id}"

    async def _post(self, path: str, body: dict[str, Any], expect: str = "success") -> Any:
        async with self.http.post(f"{self.url}{path}", json=body) as resp:
            try:
                reply = await resp.json(content_type=None)
            except ValueError:
                raise JanusError(f"{body['janus']}: HTTP {resp.status}, not JSON") from None
        return check_reply(reply, body, expect)

    async def open(self) -> None:
        """A session and an EchoTest handle on it, then the session's keepalive."""
        sent = request("create")
        self.session_id = created_id(await self._post("", sent), sent)
        sent = request("attach", plugin=ECHOTEST)
        self.handle_id = created_id(await self._post(f"/{self.session_id}", sent), sent)
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())

    async def offer(self, sdp: str) -> str:
        """Send the offer with ``{"audio": true}``, then poll the session's events until the
        answer arrives; its SDP. The caller bounds the wait."""
        assert self.handle_id is not None
        body = {"audio": True}
        jsep = {"type": "offer", "sdp": sdp, "trickle": False}  # every candidate is in the SDP
        path = f"/{self.session_id}/{self.handle_id}"
        await self._post(path, request("message", body=body, jsep=jsep), expect="ack")
        while True:  # a long poll returns at the first event, or a keepalive after ~30 s
            async with self.http.get(f"{self.url}/{self.session_id}?maxev=10") as resp:
                events = await resp.json(content_type=None)
            answer = answer_sdp(events, self.handle_id)
            if answer is not None:
                return answer

    async def _keep_alive(self) -> None:
        with contextlib.suppress(Exception):  # a failed keepalive shows as the call's loss
            while True:
                await asyncio.sleep(KEEPALIVE_S)
                await self._post(f"/{self.session_id}", request("keepalive"), expect="ack")

    async def close(self) -> None:
        """Destroy the session (its handle and PeerConnection go with it)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.session_id is not None:
            await self._post(f"/{self.session_id}", request("destroy"))
            self.session_id = None
