"""A session needs its context and nothing else: no server, no media socket (real echo backend)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiortc.rtp import RtpPacket

from testbed.callers import opus_tone_packets
from tests.support.waits import run
from tests.support.whip import make_offer
from transceiver.backend import Backend, BackendSession, SessionInfo
from transceiver.backends import create_backend
from transceiver.call.lifecycle import Limits, State
from transceiver.call.outbound import AudioClock
from transceiver.call.session import Session, SessionContext
from transceiver.metrics import TransceiverMetrics

UFRAG, PASSWORD = "ufragA", "passwordA0123456789abcdef"
SESSION_ID = "5e55" * 8
ADVERTISED, CLIENT = ("203.0.113.5", 3478), ("198.51.100.7", 50000)


class RecordingBackend(Backend):
    """The echo backend, recording what each session told it."""

    name = "recording"

    def __init__(self) -> None:
        self.echo = create_backend("echo")
        self.opened: list[SessionInfo] = []

    async def open_session(self, info, emit_audio, emit_event, on_failure) -> BackendSession:
        self.opened.append(info)
        return await self.echo.open_session(info, emit_audio, emit_event, on_failure)


@dataclass
class Host:
    """What a server would be to the session: a context, and what came back through it."""

    metrics: TransceiverMetrics = field(default_factory=TransceiverMetrics)
    backend: RecordingBackend = field(default_factory=RecordingBackend)
    sent: list = field(default_factory=list)
    selected: list = field(default_factory=list)
    closed: list = field(default_factory=list)

    def context(self) -> SessionContext:
        return SessionContext(
            transceiver_id=7,
            advertise=ADVERTISED,
            limits=Limits(ice_timeout_s=10, idle_timeout_s=60, max_duration_s=3600),
            backend=self.backend,
            metrics=self.metrics.for_sessions(),
            send=lambda ufrag, data, to: self.sent.append((ufrag, data, to)),
            on_selected=lambda ufrag, client: self.selected.append((ufrag, client)),
            on_closed=lambda session, reason: self.closed.append((session.id, reason)),
            audio_clock=AudioClock(),
        )


def test_a_session_answers_with_the_relay_s_candidate_and_opens_its_backend():
    async def go():
        host = Host()
        session = Session(host.context(), SESSION_ID, UFRAG, PASSWORD, now=0.0)
        answer = await session.answer(await make_offer(), "192.0.2.1", {"user_agent": "t"})
        assert f"a=ice-ufrag:{UFRAG}" in answer
        assert f"{ADVERTISED[0]} {ADVERTISED[1]} typ host" in answer
        assert session.state is State.CONNECTING
        assert host.backend.opened == [SessionInfo(SESSION_ID, 7, "192.0.2.1", {"user_agent": "t"})]
        session.end("deleted")
        await session.closed.wait()
        assert host.closed == [(SESSION_ID, "deleted")]

    run(go())


def test_the_caller_s_audio_reaches_the_backend_on_the_path_wired_at_answer():
    """The audio receiver's packets go through the jitter buffer and decoder to the backend
    session, counted and marking the call as heard, with nothing of the session's per frame."""

    async def go():
        host = Host()
        session = Session(host.context(), SESSION_ID, UFRAG, PASSWORD, now=0.0)
        await session.answer(await make_offer(), "192.0.2.1", {})
        (receiver,) = [t.receiver for t in session.pc.getTransceivers() if t.kind == "audio"]
        for i, payload in enumerate(opus_tone_packets(440)[:3]):
            packet = RtpPacket(payload_type=111, sequence_number=i, timestamp=i * 960, ssrc=5)
            packet.payload = payload
            receiver.inbound.push(packet)
        assert session.frames_in == 3 == session.backend.frames_in
        assert host.metrics.tallies["audio_frames_in"].count == 3
        assert session.lifecycle.first_audio_in_at is not None
        session.end("deleted")
        await session.closed.wait()

    run(go())


def test_its_ice_agent_sends_and_selects_through_the_context_under_its_ufrag():
    async def go():
        host = Host()
        session = Session(host.context(), SESSION_ID, UFRAG, PASSWORD, now=0.0)
        await session.ice.gather_candidates()
        session.ice.protocol.transport.sendto(b"\x01\x01answer", CLIENT)
        assert host.sent == [(UFRAG, b"\x01\x01answer", CLIENT)]
        session.ice._on_selected(CLIENT)
        assert host.selected == [(UFRAG, CLIENT)]

    run(go())


def test_a_backend_failure_is_counted_and_ends_the_session_once():
    async def go():
        host = Host()
        session = Session(host.context(), SESSION_ID, UFRAG, PASSWORD, now=0.0)
        session._on_backend_failure("connection lost")
        session.end("deleted")  # too late: it is ending already
        await session.closed.wait()
        assert host.closed == [(SESSION_ID, "backend_error")]
        assert host.metrics.backend_errors._value.get() == 1
        assert session.state is State.CLOSED

    run(go())


def test_a_session_that_ends_before_connecting_reports_the_steps_it_got_to_once(caplog):
    host = Host()

    async def go():
        now = time.monotonic()
        session = Session(host.context(), SESSION_ID, UFRAG, PASSWORD, now, offer_at=now - 0.001)
        await session.answer(await make_offer(), "192.0.2.1", {})
        session.end("deleted")
        session.end("idle")
        await session.closed.wait()

    with caplog.at_level("INFO", logger="rtcedge.transceiver"):
        run(go())
    lines = [r.getMessage() for r in caplog.records if " connect: " in r.getMessage()]
    assert len(lines) == 1 and "offer=1.0ms" in lines[0] and "answer=" in lines[0], lines
    assert "ice=" not in lines[0], "no step it did not get to"

    def count(phase: str) -> float | None:
        name = "rtcedge_transceiver_connect_phase_seconds_count"
        return host.metrics.registry.get_sample_value(name, {"phase": phase})

    assert (count("offer"), count("answer"), count("ice")) == (1.0, 1.0, 0.0)
