"""``rtcedge up --agent``: a voice agent to talk to in one command (real processes).

``up`` starts the example voice agent (examples/voice_agent/agent.py) as a child of its own on a
free loopback port, with a fresh key by files and environments only, and points the transceiver's
realtime backend at it. An aiortc caller says "hello" over WHIP and hears the agent answer, with
the agent's Realtime events on its ``oai-events`` channel; the Realtime door the /realtime page
calls answers too. The agent ends with ``up``, whether ``up`` stops (SIGTERM) or is killed
(SIGKILL: the parent-death signal, common/lifetime.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import av
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from testbed.callers import loopback_only, peak, prompt_ice, whip_call
from testbed.ports import free_port
from testbed.procfs import children_of, descendants
from testbed.voice_agent import AGENT, agent_missing
from tests.support.processes import alive, identities
from tests.support.up import REPO, end_up, up_command, up_env, wait_ready
from tests.support.voice_agent import spoken
from tests.support.waits import run, wait_for, wait_until
from tests.support.whip import make_offer

pytestmark = pytest.mark.skipif(
    bool(agent_missing()), reason=f"the voice agent needs {agent_missing()} (the agent extra)"
)

READY_TIMEOUT_S = 90.0  # the agent's imports and model first, on a busy machine
GONE_TIMEOUT_S = 15.0  # bound, not a speed claim: the transceiver drains for 2 s on SIGTERM
RATE = 24_000  # the speech's rate, the Realtime API's
FRAME = 480  # 20 ms at 24 kHz
LOUD = 1000  # a frame's peak sample above this is audible (silence decodes to ~0)


class Speech(MediaStreamTrack):
    """``pcm`` (PCM16 mono at 24 kHz) said once, then silence; paced 20 ms frames."""

    kind = "audio"

    def __init__(self, pcm: bytes) -> None:
        super().__init__()
        self.pcm = pcm
        self.pts = 0
        self.start: float | None = None

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        loop = asyncio.get_running_loop()
        self.start = self.start or loop.time()
        await asyncio.sleep(max(0.0, self.start + self.pts / RATE - loop.time()))
        chunk = self.pcm[self.pts * 2 : (self.pts + FRAME) * 2]
        frame = av.AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(chunk.ljust(FRAME * 2, b"\0"))
        frame.sample_rate, frame.time_base, frame.pts = RATE, fractions.Fraction(1, RATE), self.pts
        self.pts += FRAME
        return frame


async def talk(url: str) -> tuple[list[dict], int]:
    """Say "hello" over WHIP to ``url``; the Realtime events received and the audible frames
    heard once the agent's answer began (its ``response.created``)."""
    loopback_only()
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTrack(Speech(spoken("hello") + b"\0" * RATE * 2))  # then a second of silence
    channel = pc.createDataChannel("oai-events")
    events: list[dict] = []
    heard = [0]
    channel.on("message", lambda message: events.append(json.loads(message)))

    async def listen(track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            answering = any(e["type"] == "response.created" for e in events)
            heard[0] += answering and peak(frame) > LOUD

    pc.on("track", lambda track: asyncio.ensure_future(listen(track)))
    try:
        await pc.setLocalDescription(await pc.createOffer())
        prompt_ice(pc)
        await whip_call(pc, url)  # 201, or it raises with the status
        await wait_until(lambda: any(e["type"] == "response.done" for e in events), 30)
        await wait_until(lambda: heard[0] >= 10, 5)
    finally:
        await pc.close()
    return events, heard[0]


@contextlib.contextmanager
def agent_up() -> Iterator[tuple[subprocess.Popen[str], str, dict[int, str | None]]]:
    """``rtcedge up --agent`` on free loopback ports, in its own session, until the block ends:
    (it, its ready line, the processes it started); all of them ended by PID afterwards."""
    up = subprocess.Popen(
        up_command("--agent", "--http", f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}",
                   "--relay", f"127.0.0.1:{free_port('127.0.0.1')}"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=up_env(), cwd=REPO, start_new_session=True,
    )  # fmt: skip
    seen: list[str] = []
    children: dict[int, str | None] = {}
    reader = None
    try:
        reader = wait_ready(up, READY_TIMEOUT_S, seen)
        children = identities(descendants(up.pid))
        yield up, seen[-1], children
    finally:
        end_up(up, children, reader, term_timeout_s=0)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_text().split("\0")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def the_one(children: dict[int, str | None], *words: str) -> int:
    """The one child whose command line holds ``words`` in order."""
    found = [
        pid
        for pid in children
        if any(cmdline(pid)[i : i + len(words)] == list(words) for i in range(len(cmdline(pid))))
    ]
    assert len(found) == 1, {pid: cmdline(pid) for pid in children}
    return found[0]


def test_up_agent_answers_a_call_and_its_agent_ends_with_up() -> None:
    with agent_up() as (up, ready, children):
        agent = the_one(children, str(AGENT))
        trx = the_one(children, "transceiver", "serve")
        page = ready.split("open ", 1)[1].split()[0]
        assert page.endswith("/realtime"), ready
        base = page.removesuffix("/realtime")
        assert f"{base}/ and press Talk" in ready, ready
        with urllib.request.urlopen(page, timeout=10) as response:  # the page it names
            assert response.status == 200 and "text/html" in response.headers["Content-Type"]

        # The transceiver's realtime backend is the agent, by the environment, with the key
        # the agent read from a file now gone; no key on any command line.
        env = environ(trx)
        agent_port = env["RTCEDGE_BACKEND_URL"].split(":")[2].split("/")[0]
        assert f"ws://127.0.0.1:{agent_port}/v1/realtime" in ready
        assert cmdline(trx)[cmdline(trx).index("--backend") + 1] == "realtime"
        key_file = cmdline(agent)[cmdline(agent).index("--key-file") + 1]
        assert not Path(key_file).exists()
        key = env["RTCEDGE_BACKEND_KEY"]
        assert all(key not in " ".join(cmdline(pid)) for pid in children)

        events, heard = run(talk(base), timeout_s=60)
        kinds = [e["type"] for e in events]
        for kind in ("session.created", "input_audio_buffer.speech_started", "response.done"):
            assert kind in kinds, kinds  # the agent's events, through the realtime backend
        assert heard >= 10, f"{heard} audible frames of the answer: {kinds}"

        up.send_signal(signal.SIGTERM)
        up.wait(timeout=GONE_TIMEOUT_S)
        assert wait_for(lambda: alive(children), [], GONE_TIMEOUT_S), alive(children)
        assert up.returncode == 0


async def realtime_call(base: str) -> tuple[int, str]:
    """An offer at the Realtime door as the /realtime page sends it with no key (the local
    stack's door is open): (status, Content-Type)."""
    headers = {"Content-Type": "application/sdp", "Authorization": "Bearer "}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/realtime/calls", data=await make_offer(), headers=headers) as r,
    ):
        return r.status, r.content_type


def test_the_agent_ends_when_up_is_killed() -> None:
    with agent_up() as (up, ready, children):
        assert the_one(children, str(AGENT)) in children_of(up.pid)  # `up`'s own child
        base = ready.split("open ", 1)[1].split()[0].removesuffix("/realtime")
        assert run(realtime_call(base)) == (201, "application/sdp")
        up.send_signal(signal.SIGKILL)
        up.wait(timeout=GONE_TIMEOUT_S)
        assert wait_for(lambda: alive(children), [], GONE_TIMEOUT_S), alive(children)
