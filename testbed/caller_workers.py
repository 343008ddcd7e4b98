"""Many aiortc echo calls per process, driven over a pipe: the callers of the sessions, connect
and geo benchmarks.

A caller worker (``python -m testbed.caller_workers MAX_SECONDS``) runs several calls on one
asyncio loop and speaks a line protocol: one JSON command per line on stdin, one JSON reply per
line on stdout. Each call sends a tone encoded to Opus once at start-up (``OpusToneTrack``) and
counts what comes back at the RTP level (``EchoCounter``), so that the callers stay cheap and
the transceiver, not they, is what runs out. ``WorkerProcess`` and ``collect`` are the
benchmark's end of the pipe (e.g. ``bench/sessions.py``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import gc
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from testbed.processes import stop_process


# -- the worker process: several calls on one asyncio loop -----------------------------------------
def _no_decoder_thread(pc: Any) -> None:
    """A light caller's audio receiver starts no decoder thread: its packets go to the
    ``EchoCounter`` (``attach``), never to a decoder, yet stock aiortc starts a thread per call
    and hands it every packet (at 20 calls connecting at once, thread starts and hand-offs were
    ~10 % of the callers' CPU). The transceiver's own receiver without one
    (``transceiver.call.inbound``) stands in; call after ``setRemoteDescription``,
    before connected."""
    from transceiver.backend import OPUS
    from transceiver.call.inbound import InboundAudio
    from transceiver.call.seam import install_receiver

    install_receiver(pc, InboundAudio(OPUS, on_opus=lambda frame: None))


def _clocked_sender(pc: Any, tone: Any, audio_clock: Any) -> None:
    """A light caller's tone leaves on a 20 ms clock of its own, through the transceiver's
    clocked sender (``transceiver.call.outbound``): aiortc's sender loop per call (a timer, a task
    wake-up and a chain of awaits per packet, NTP time from two datetimes) was 80 % of the
    callers' CPU with 80 opus calls, so that the callers' core ran out before the
    transceiver's. One clock per call, started when it connects, not one per worker: the calls'
    packets reach the transceiver spread over the 20 ms as independent callers' do, not ten at
    once (which would flatter its CPU per packet). Packets go to the ICE pair aioice nominated,
    as aiortc's would. Call after ``addTrack``."""
    from transceiver.call.seam import install_sender, send_on_nominated_pair

    sender = next(s for s in pc.getSenders() if s.track is tone)
    install_sender(pc, tone, audio_clock, send_on_nominated_pair(sender))


def _sent_stream(pc: Any) -> tuple[int | None, int | None]:
    """A light caller's (SSRC, sequence number of its first packet): its clocked sender numbers
    every packet the track hands it in turn (``transceiver.call.seam.DirectSender``); (None,
    None) for a stock caller or before it sends."""
    for sender in pc.getSenders():
        direct = getattr(sender, "direct", None)
        if direct is not None:
            return sender._ssrc, (direct._seq - direct.packets_sent) & 0xFFFF
    return None, None


class _EchoInbound:
    """Stands in for ``transceiver.call.inbound.InboundAudio`` under a light caller's receiver:
    every RTP packet goes to the ``EchoCounter``, what the direct path drops is counted."""

    def __init__(self, echo: Any) -> None:
        self._count = echo.count
        self.packets = 0  # taken by the direct path
        self.dropped: collections.Counter[str] = collections.Counter()

    def push(self, packet: Any) -> None:
        self.packets += 1
        self._count(packet)

    def drop(self, event: str) -> None:
        self.dropped[event] += 1


def _direct_echo(pc: Any, echo: Any) -> _EchoInbound | None:
    """A connected light caller's SRTP goes from aioice's socket callback straight to its
    ``EchoCounter`` (``transceiver.call.inbound.direct_rtp``), not through aiortc's queue and DTLS
    receive task; RTCP and DTLS still take aiortc's way. None if the call has no audio
    receiver made light (``_no_decoder_thread``)."""
    from transceiver.call.inbound import direct_rtp
    from transceiver.call.seam import InlineAudioReceiver, divert_rtp, latch_srtp
    from transceiver.call.ssrc import SsrcLatch

    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind == "audio" and isinstance(receiver, InlineAudioReceiver):
            break
    else:
        return None
    inbound = _EchoInbound(echo)
    receiver.inbound = inbound
    dtls = receiver.transport
    srtp = latch_srtp(dtls, SsrcLatch(), lambda: None)  # the transceiver's one SSRC
    if srtp is None:
        return None
    divert_rtp(dtls, direct_rtp(receiver, srtp))
    return inbound


# What a call sends: DELAY_LEVELS' tone, a beep a second, or speech in a loop (its packets and
# the index of the one that ends the speech, from the benchmark: ``connect``'s ``speech``).
TONE, BEEPS, SPEECH = "tone", "beeps", "speech"
# How a call offers: WHIP (rtcedge), or Janus's HTTP API to its EchoTest (testbed/janus.py).
WHIP, JANUS = "whip", "janus"
LOOPBACK = "127.0.0.1"


class EchoCall:
    """One caller: WHIP offer, a tone out, the echo counted; hung up by DELETE. With
    ``signalling`` ``janus`` the same call to Janus's EchoTest instead (``connect``'s ``url``
    is then its API's, ``http://HOST:PORT/janus``): a session and a handle first, the offer in
    a message, the answer from its events, the session destroyed to hang up.

    ``audio`` ``beeps`` (``testbed.callers.beep_packets``): the sending of each beep's first
    packet is marked (``tone.marks``) and every sound heard after silence too (``echo.onsets``),
    for the realtime benchmark; the first event on the data channel is kept
    (``first_event_id``: a Realtime server's names its session). ``audio`` ``speech``: the
    packets loop a sentence and silence, the packet at ``mark_at`` (the speech's last with
    sound) is marked as it is sent, and every sound heard after silence is kept, unchecked (a
    voice agent's answer is no tone): the turn benchmark's."""

    def __init__(
        self,
        call_id: int,
        hz: int,
        packets: list[bytes],
        certificate: Any = None,
        audio: str = TONE,
        mark_at: int | None = None,
    ) -> None:
        """``certificate``: a light caller's (``CallerWorker``), else stock aiortc."""
        # aiortc is imported in the worker processes only: the benchmark imports this module.
        from aiortc import RTCConfiguration, RTCPeerConnection

        from testbed.callers import EchoCounter, OpusToneTrack
        from transceiver.call.seam import use_certificate

        self.id = call_id
        self.hz = hz
        self.light = certificate is not None
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        if certificate is not None:
            use_certificate(self.pc, certificate)
        self.tone = OpusToneTrack(packets, mark_at=0 if audio == BEEPS else mark_at)
        self.pc.addTrack(self.tone)
        self.audio_clock: Any = None  # a light caller's own 20 ms clock
        if certificate is not None:
            from transceiver.call.outbound import AudioClock

            self.audio_clock = AudioClock()
            _clocked_sender(self.pc, self.tone, self.audio_clock)
        self.direct_echo: _EchoInbound | None = None
        # A data channel, as real voice clients have (events): the transceiver pays for SCTP.
        self.first_event_id: str | None = None
        self.channel_open_at: float | None = None  # the data channel open (SCTP and DCEP done)
        self.channel_opened = asyncio.Event()
        channel = self.pc.createDataChannel("events")
        channel.on("message", self._on_event)
        channel.on("open", self._on_channel_open)
        tone = self.tone
        # Beeps: every packet decoded (their silence could match an encoder's silence byte for
        # byte) and no delay pattern to follow.
        self.echo = EchoCounter(
            hz,
            own_packets=packets if audio == TONE else (),
            sent_clock=(lambda: (tone._start, tone.frames_sent)) if audio == TONE else None,
            check_tone=audio != SPEECH,
        )
        self.window_start = 0.0  # monotonic: the step's window began (its first mark)
        self.connected = asyncio.Event()
        self.offer_at: float | None = None  # the offer made, its POST about to leave
        self.answer_at: float | None = None  # the answer read
        self.ice_at: float | None = None  # this caller's ICE completed
        self.connected_at: float | None = None  # ICE and DTLS: media may flow
        self.location = ""
        self.status = 0  # of the WHIP POST
        self.retry_after = ""  # its Retry-After, if refused
        self.refusals = 0  # 503s it got (and retried after their Retry-After)
        self.error = ""
        self.hanging_up = False
        self.janus: Any = None  # testbed.janus.JanusEchoTest, for a call to Janus
        self.janus_open_s: float | None = None  # its session and handle made, before the offer
        self.pc.on("connectionstatechange", self._on_state)
        self.pc.on("iceconnectionstatechange", self._on_ice_state)
        self.pc.on("track", self._on_track)

    def _on_state(self) -> None:
        if self.pc.connectionState == "connected" and self.connected_at is None:
            self.connected_at = time.monotonic()
            self.connected.set()
            if self.light:
                self.direct_echo = _direct_echo(self.pc, self.echo)
        elif self.pc.connectionState in ("failed", "closed") and not self.hanging_up:
            self.error = self.error or f"connection {self.pc.connectionState}"

    def _on_ice_state(self) -> None:
        if self.pc.iceConnectionState in ("connected", "completed") and self.ice_at is None:
            self.ice_at = time.monotonic()

    def _on_channel_open(self) -> None:
        self.channel_open_at = time.monotonic()
        self.channel_opened.set()

    def _on_event(self, message: Any) -> None:
        if self.first_event_id is None and isinstance(message, str):
            with contextlib.suppress(ValueError, AttributeError):
                self.first_event_id = str(json.loads(message).get("event_id"))

    def timings(self, since: float) -> dict[str, Any]:
        """Since wall time ``since``: when each beep left (wall time, its index, how late its
        tick was) and when each sound after silence arrived (wall time, RTP sequence number,
        when the next packet did); the SSRC this caller sends with and the sequence number of
        its first packet (with a mark's index: the marked packet's), the SSRC it hears."""
        ssrc, first_seq = _sent_stream(self.pc)
        return {
            "id": self.id,
            "first_event_id": self.first_event_id,
            "location": self.location,  # its WHIP resource: the session id, signed
            "marks": [m for m in self.tone.marks if m[0] >= since],
            "onsets": [o for o in self.echo.onsets if o[0] >= since],
            "ssrc": ssrc,
            "first_seq": first_seq,
            "far_ssrc": self.echo.ssrc,
        }

    def _on_track(self, track: Any) -> None:
        for transceiver in self.pc.getTransceivers():
            if transceiver.receiver.track is track:
                self.echo.attach(transceiver.receiver)

    async def connect(
        self,
        http: Any,
        url: str,
        timeout_s: float,
        echo_s: float = 0.0,
        retries: int = 0,
        signalling: str = WHIP,
        channel_s: float = 0.0,
    ) -> None:
        """Offer, apply the answer, wait until connected; then, for up to ``channel_s``, until
        its data channel is open (the connect benchmark's CPU window ends when the whole call
        is up), and for up to ``echo_s``, until the first echo of its own tone came back. A
        Janus call
        makes its session and handle before the offer, as a page does when it loads
        (``janus_open_s``): the offer to connected is timed alike for both."""
        from aiortc import RTCSessionDescription

        try:
            if signalling == JANUS:
                from testbed.janus import JanusEchoTest

                self.janus = JanusEchoTest(http, url)
                started = time.monotonic()
                async with asyncio.timeout(timeout_s):
                    await self.janus.open()
                self.janus_open_s = time.monotonic() - started
                self.location = self.janus.location
            await self.pc.setLocalDescription(await self.pc.createOffer())
            if self.light:
                from testbed.callers import prompt_ice

                prompt_ice(self.pc)
            self.offer_at = time.monotonic()
            async with asyncio.timeout(timeout_s):
                body = await (
                    self._janus_offer() if self.janus else self._whip_offer(http, url, retries)
                )
                if body is None:
                    return
                await self.pc.setRemoteDescription(RTCSessionDescription(body, "answer"))
                if self.light:
                    _no_decoder_thread(self.pc)
                await self.connected.wait()
            if channel_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.channel_opened.wait(), channel_s)
            deadline = time.monotonic() + echo_s
            while self.echo.first_echo_at is None and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        except TimeoutError:
            self.error = f"not connected within {timeout_s:.0f} s: {self.pc.connectionState}"
        except Exception as exc:  # a failed call is a result, not the end of the benchmark
            self.error = f"{type(exc).__name__}: {exc}"

    async def _whip_offer(self, http: Any, url: str, retries: int) -> str | None:
        """POST the offer to ``url``/whip; the answer, or None (``error`` says why). A 503 is
        retried after its Retry-After, ``retries`` times."""
        while True:
            async with http.post(
                f"{url}/whip",
                data=self.pc.localDescription.sdp,
                headers={"Content-Type": "application/sdp"},
            ) as resp:
                body = await resp.text()
                self.answer_at = time.monotonic()
                self.status = resp.status
                self.retry_after = resp.headers.get("Retry-After", "")
                if resp.status == 201:
                    self.location = resp.headers["Location"]
                    return body
                self.error = f"POST {resp.status}: {body.strip()[:200]}"
                if resp.status != 503 or self.refusals >= retries:
                    return None
            self.refusals += 1
            await asyncio.sleep(float(self.retry_after or 1))
            self.error = ""

    async def _janus_offer(self) -> str:
        """The offer to Janus's EchoTest; its answer (``status`` 200 once it came)."""
        answer = await self.janus.offer(self.pc.localDescription.sdp)
        self.answer_at = time.monotonic()
        self.status = 200
        return answer

    def counters(self) -> list[int]:
        e = self.echo
        return [e.packets_received, e.packets_expected, e.audio_frames, self.tone.frames_sent]

    async def link_stats(self) -> dict[str, float | None]:
        """RTT and the forward path's jitter from the far end's RTCP receiver reports (aiortc's
        smoothed RTT from LSR/DLSR), and the echo stream's jitter as this caller measured it."""
        rtt_s = forward_jitter_s = None
        for sender in self.pc.getSenders():
            with contextlib.suppress(Exception):
                for s in (await sender.getStats()).values():
                    if s.type == "remote-inbound-rtp":
                        rtt_s = s.roundTripTime
                        forward_jitter_s = s.jitter / 48000 if s.jitter is not None else None
        return {
            "rtt_s": rtt_s,
            "forward_jitter_s": forward_jitter_s,
            "jitter_s": self.echo.jitter_s,
        }

    async def hang_up(self, http: Any, url: str, timeout_s: float) -> None:
        self.hanging_up = True
        try:
            if self.janus is not None:
                async with asyncio.timeout(timeout_s):
                    await self.janus.close()
            elif self.location:
                async with asyncio.timeout(timeout_s):
                    async with http.delete(f"{url}{self.location}") as resp:
                        if resp.status != 200 and not self.error:
                            self.error = f"DELETE {resp.status}"
        except Exception as exc:
            self.error = self.error or f"DELETE failed: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.pc.close(), timeout_s)

    def summary(self) -> dict[str, Any]:
        e = self.echo
        return {
            "id": self.id,
            "hz": self.hz,
            "connected": self.connected_at is not None,
            "status": self.status,
            "retry_after": self.retry_after,
            "refusals": self.refusals,
            "error": self.error,
            "janus_open_s": self.janus_open_s,
            "offer_to_answer_s": _since(self.offer_at, self.answer_at),
            "offer_to_ice_s": _since(self.offer_at, self.ice_at),
            "offer_to_connected_s": _since(self.offer_at, self.connected_at),
            "offer_to_first_echo_s": _since(self.offer_at, e.first_echo_at),
            "offer_to_channel_open_s": _since(self.offer_at, self.channel_open_at),
            "tone_checks": e.tone_checks,
            "tone_checks_own": e.tone_checks_own,
            "tone_checks_unclear": e.tone_checks_unclear,
            "foreign_tones": e.foreign_tones,
            "decode_errors": e.decode_errors,
            "inbound_dropped": dict(self.direct_echo.dropped) if self.direct_echo else {},
            "echo_delay_ms": e.echo_delay_ms(since=self.window_start),
        }


def _since(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


class CallerWorker:
    """The worker side of the line protocol: one JSON command per line on stdin, one JSON reply
    per line on stdout. Commands: tones {hz: [...]} (encodes them ahead), connect {url, calls:
    [[id, hz]...], timeout_s, echo_s, light} (adds calls to those it holds; the reply sums up
    the new ones; ``audio``: ``tone`` or ``beeps``), mark, stats, timings {since} (every
    call's ``EchoCall.timings``), hangup {timeout_s} (every call), exit.

    Light callers (``light``) are closer to a browser in what connecting costs them: their ICE
    connects at completion (``testbed.callers.prompt_ice``), they share one DTLS
    certificate per worker (``transceiver.call.certificate``) and start no decoder thread, so that
    many callers connecting at once on one CPU do not measure aiortc's client-side costs
    instead of the transceiver. Once connected, their media takes the transceiver's own direct
    paths: the tone leaves on a 20 ms clock of its own (``_clocked_sender``) and the echo's
    SRTP goes from the socket's callback to the ``EchoCounter`` (``_direct_echo``)."""

    def __init__(self) -> None:
        self.calls: list[EchoCall] = []
        self.url = ""
        self.signalling = WHIP
        self._packets: dict[tuple[int, str], list[bytes]] = {}
        self._certificate: Any = None  # the light callers' one certificate
        self.http: Any = None

    def reply(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    async def handle(self, cmd: dict[str, Any]) -> bool:
        """One command from the parent; False for ``exit``. Unknown commands are ignored."""
        kind = cmd["cmd"]
        if kind == "exit":
            return False
        handler = {
            "tones": self._tones,
            "connect": self._connect,
            "mark": self._mark,
            "stats": self._stats,
            "timings": self._timings,
            "hangup": self._hang_up,
        }.get(kind)
        if handler is not None:
            await handler(cmd)
        return True

    def _tone_packets(self, hz: int, audio: str = TONE) -> list[bytes]:
        """The caller's tone (or beeps) at ``hz``, encoded once per worker."""
        from testbed.callers import DELAY_LEVELS, beep_packets, opus_tone_packets

        if (hz, audio) not in self._packets:
            self._packets[hz, audio] = (
                beep_packets(hz) if audio == BEEPS else opus_tone_packets(hz, levels=DELAY_LEVELS)
            )
        return self._packets[hz, audio]

    async def _tones(self, cmd: dict[str, Any]) -> None:
        for hz in cmd["hz"]:
            self._tone_packets(hz, cmd.get("audio", TONE))
        self.reply({"event": "tones"})

    async def _connect(self, cmd: dict[str, Any]) -> None:
        from testbed.callers import gather_on

        self.url = cmd["url"]
        self.signalling = cmd.get("signalling", WHIP)
        gather_on(cmd.get("host", LOOPBACK))  # these calls' one ICE candidate
        audio, mark_at = cmd.get("audio", TONE), None
        if audio == SPEECH:  # the same speech for every call, encoded by the benchmark
            speech = cmd["speech"]
            mark_at = speech["mark_at"]
            for _call_id, hz in cmd["calls"]:
                self._packets[hz, audio] = [base64.b64decode(p) for p in speech["packets"]]
        for _call_id, hz in cmd["calls"]:  # encode before the offers: not part of the timing
            self._tone_packets(hz, audio)
        certificate = None
        if cmd.get("light", False):
            if self._certificate is None:
                from transceiver.call.seam import SharedCertificate

                self._certificate = SharedCertificate.generateCertificate()
            certificate = self._certificate
        new = [
            EchoCall(i, hz, self._packets[hz, audio], certificate, audio, mark_at)
            for i, hz in cmd["calls"]
        ]
        self.calls += new
        echo_s, retries = cmd.get("echo_s", 0.0), cmd.get("retries", 0)
        channel_s = cmd.get("channel_s", 0.0)
        await asyncio.gather(
            *(
                c.connect(
                    self.http,
                    self.url,
                    cmd["timeout_s"],
                    echo_s,
                    retries,
                    self.signalling,
                    channel_s,
                )
                for c in new
            )
        )
        self.reply({"event": "connected", "calls": [c.summary() for c in new]})

    async def _mark(self, cmd: dict[str, Any]) -> None:
        for c in self.calls:  # the window's first mark starts what echo_delay_ms reads
            c.window_start = c.window_start or time.monotonic()
        counters = {c.id: c.counters() for c in self.calls}
        self.reply({"event": "mark", "t": time.monotonic(), "calls": counters})

    async def _stats(self, cmd: dict[str, Any]) -> None:
        stats = await asyncio.gather(*(c.link_stats() for c in self.calls))
        by_id = {c.id: s for c, s in zip(self.calls, stats, strict=True)}
        self.reply({"event": "stats", "t": time.monotonic(), "calls": by_id})

    async def _timings(self, cmd: dict[str, Any]) -> None:
        calls = [c.timings(cmd.get("since", 0.0)) for c in self.calls]
        self.reply({"event": "timings", "calls": calls})

    async def _hang_up(self, cmd: dict[str, Any]) -> None:
        await asyncio.gather(
            *(c.hang_up(self.http, self.url, cmd["timeout_s"]) for c in self.calls)
        )
        self.reply({"event": "hungup", "calls": [c.summary() for c in self.calls]})
        self.calls = []

    async def serve(self) -> None:
        import aiohttp
        import aiortc  # noqa: F401  (imported before the freeze below, which then covers it)

        import testbed.callers  # noqa: F401

        # As the transceiver does: what lives as long as the process is kept out of the cyclic
        # collector's full passes, whose pauses held a worker's calls' audio up for tens of ms.
        gc.collect()
        gc.freeze()
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as self.http:
            try:
                self.reply({"event": "ready", "pid": os.getpid()})
                while line := await reader.readline():  # EOF: the parent is gone
                    if not await self.handle(json.loads(line)):
                        break
            finally:
                for call in self.calls:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(call.pc.close(), 5)


def worker_main(argv: list[str]) -> None:
    """Entry point of a worker process: serves commands until ``exit``, EOF or its deadline."""
    from testbed.callers import loopback_only

    max_seconds = float(argv[0]) if argv else 600.0
    loopback_only()
    with contextlib.suppress(TimeoutError, KeyboardInterrupt):
        asyncio.run(asyncio.wait_for(CallerWorker().serve(), max_seconds))


CALLERS = ("light", "stock")
callers_option = click.option(
    "--callers",
    type=click.Choice(CALLERS),
    default="light",
    show_default=True,
    help="light: aiortc callers that connect ICE at completion, share a certificate per process "
    "(as a browser costs) and send and count their media on the transceiver's own direct paths; "
    "stock: aiortc as it is.",
)


# -- the orchestrator's end of the workers --------------------------------------------------------
class WorkerProcess:
    """A worker in a child process, spoken to over its stdin/stdout."""

    def __init__(self, index: int, max_seconds: float, log_dir: Path) -> None:
        self.index = index
        self.log_path = log_dir / f"worker-{index}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testbed.caller_workers", str(max_seconds)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.pending = b""  # a reply line read in part

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def log_tail(self, chars: int = 1500) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-chars:]
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.send({"cmd": "exit"})
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)  # SIGTERM, then SIGKILL
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


def collect(workers: list[WorkerProcess], event: str, timeout_s: float) -> list[dict[str, Any]]:
    """One reply ``event`` from every worker, in worker order, within ``timeout_s``."""
    replies: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    by_fd = {w.proc.stdout.fileno(): w for w in workers}  # type: ignore[union-attr]
    while len(replies) < len(workers):
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            missing = [w.index for w in workers if w.index not in replies]
            raise RuntimeError(f"workers {missing} did not answer '{event}' in {timeout_s:.0f} s")
        ready, _, _ = select.select(list(by_fd), [], [], left_s)
        for fd in ready:
            w = by_fd[fd]
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError(f"worker {w.index} exited: {w.log_tail()}")
            w.pending += chunk
            while b"\n" in w.pending:
                line, w.pending = w.pending.split(b"\n", 1)
                message = json.loads(line)
                if message.get("event") == event:
                    replies[w.index] = message
    return [replies[w.index] for w in workers]


# -- the commands, sent to several workers at once and answered by each ----------------------------
def connect(
    shares: dict[WorkerProcess, list[list[int]]],
    url: str,
    timeout_s: float,
    echo_s: float = 0.0,
    light: bool = False,
    retries: int = 0,
    audio: str = TONE,
    speech: tuple[list[bytes], int] | None = None,
    signalling: str = WHIP,
    host: str = LOOPBACK,
    channel_s: float = 0.0,
) -> list[dict[str, Any]]:
    """Each worker connects its share of calls ([id, tone Hz] each) to the WHIP ``url`` (and
    waits up to ``echo_s`` more for each one's first echo); ``light``: light callers
    (``CallerWorker``); ``retries``: a 503 is retried after its Retry-After, this many times;
    ``audio``: what they send, ``tone``, ``beeps`` or ``speech`` (``EchoCall``), whose
    (packets, index of the packet ending the speech) is ``speech``
    (``testbed.callers.speech_packets``); ``signalling`` ``janus``: to Janus's EchoTest at
    ``url`` instead (``EchoCall``); ``host``: the address the calls' ICE gathers on;
    ``channel_s``: each call waits up to this long for its data channel to open."""
    for w, share in shares.items():
        message = {"cmd": "connect", "url": url, "calls": share, "timeout_s": timeout_s}
        message |= {"echo_s": echo_s, "light": light, "retries": retries, "audio": audio}
        message |= {"signalling": signalling, "host": host, "channel_s": channel_s}
        if speech is not None:
            packets, mark_at = speech
            encoded = [base64.b64encode(p).decode() for p in packets]
            message["speech"] = {"packets": encoded, "mark_at": mark_at}
        w.send(message)
    return collect(list(shares), "connected", timeout_s + echo_s + channel_s + 30)


def prepare_tones(shares: dict[WorkerProcess, list[list[int]]]) -> None:
    """Each worker encodes the tones of its share of calls now, not when they connect."""
    for w, share in shares.items():
        w.send({"cmd": "tones", "hz": [hz for _, hz in share]})
    collect(list(shares), "tones", 60)


def mark(workers: list[WorkerProcess]) -> list[dict[str, Any]]:
    """Every call's counters, now: two marks bound a window of the callers' own counts."""
    for w in workers:
        w.send({"cmd": "mark"})
    return collect(workers, "mark", 10)


def link_stats(workers: list[WorkerProcess]) -> list[dict[str, Any]]:
    """Every call's RTT and jitter, now (``EchoCall.link_stats``)."""
    for w in workers:
        w.send({"cmd": "stats"})
    return collect(workers, "stats", 10)


def timings(workers: list[WorkerProcess], since: float) -> list[dict[str, Any]]:
    """Every call's beep marks and sound onsets since wall time ``since`` (``EchoCall.timings``)."""
    for w in workers:
        w.send({"cmd": "timings", "since": since})
    return collect(workers, "timings", 20)


def hang_up(workers: list[WorkerProcess]) -> list[dict[str, Any]]:
    """Every call hangs up (WHIP DELETE); the replies hold each call's final summary."""
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.send({"cmd": "hangup", "timeout_s": 5})
    return collect(workers, "hungup", 30)


def start_workers(
    count: int, max_seconds: float, log_dir: Path, stack: contextlib.ExitStack
) -> list[WorkerProcess]:
    """``count`` workers, ready; each is stopped by ``stack`` (an ExitStack) on the way out."""
    workers: list[WorkerProcess] = []

    def stop_all() -> None:
        for w in workers:
            w.stop()

    stack.callback(stop_all)
    for i in range(count):
        workers.append(WorkerProcess(i, max_seconds, log_dir))
    collect(workers, "ready", 60)
    return workers


if __name__ == "__main__":
    worker_main(sys.argv[1:])
