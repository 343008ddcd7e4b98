"""One WebRTC session: an aiortc peer connection on the shared socket, bridged to a backend.

The I/O half of a session; its states and deadlines live in ``transceiver.call.lifecycle``. Every
way a session ends goes through ``end(reason)``, which releases the peer connection, the
backend session, the tasks and the demultiplexer entry exactly once.

A session knows nothing of the server that holds it (as aioquic's connection knows nothing of
its asyncio layer): it gets a ``SessionContext``, the few things it uses, built once by the
server. Sessions are created in ``TransceiverServer.create_session`` (transceiver/server.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiortc import (
    RTCBundlePolicy,
    RTCCertificate,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)

from common.addr import Addr
from transceiver.backend import (
    AUDIO_FORMATS,
    AUDIO_SAMPLE_RATE,
    OPUS,
    PCM16,
    SAMPLE_RATES,
    Backend,
    BackendSession,
    SessionInfo,
)
from transceiver.call import inbound, outbound, sctp, seam
from transceiver.call.bundle import BundledOffer, payload_types
from transceiver.call.ice import SharedSocketConnection
from transceiver.call.libopus import DEFAULTS, EncoderSettings
from transceiver.call.lifecycle import Lifecycle, Limits, State
from transceiver.call.outbound_track import BackendAudioTrack
from transceiver.call.ssrc import SsrcLatch, offered_ssrcs
from transceiver.metrics import SessionMetrics

log = logging.getLogger("rtcedge.transceiver")

EVENTS_CHANNEL = "events"
# OpenAI's Realtime WebRTC clients name theirs "oai-events"; a call takes whichever comes first.
EVENTS_CHANNELS = frozenset({EVENTS_CHANNEL, "oai-events"})
MAX_PENDING_EVENTS = 32
MAX_EVENT_BYTES = sctp.MAX_MESSAGE_BYTES  # also the answer's a=max-message-size
# Events a backend sends to the transceiver itself (docs/backend-protocol.md), not to the caller.
CLEAR_AUDIO = "audio.clear"  # drop the caller-bound audio not yet played (barge-in)
HANGUP = "session.hangup"  # end the call


@dataclass(frozen=True)
class SessionContext:
    """What a session may use of the process that holds it; one, shared by every session."""

    transceiver_id: int  # told to the backend
    advertise: Addr  # the relay's public address: a session's ICE candidate unless told others
    limits: Limits  # the lifecycle's deadlines
    backend: Backend
    metrics: SessionMetrics
    send: Callable[[str, bytes, Addr | None], None]  # (ufrag, datagram, to): the media socket
    on_selected: Callable[[str, Addr], object]  # (ufrag, client): ICE proved a path to client
    on_closed: Callable[[Session, str], None]  # (session, reason): teardown is over, forget it
    audio_clock: outbound.AudioClock  # paces every session's outbound RTP
    # The process's DTLS certificate for a new session (transceiver.call.certificate); None: aiortc
    # makes one per session.
    certificate: Callable[[], RTCCertificate] | None = None
    advertise_tcp: Addr | None = None  # the relay's ICE-TCP address: a passive TCP candidate
    sctp_limits: sctp.SctpLimits = field(default_factory=sctp.SctpLimits)  # data channel bounds
    encoder_settings: EncoderSettings = DEFAULTS  # the outbound Opus encoder's (--opus-*)


class Session:
    def __init__(
        self,
        context: SessionContext,
        session_id: str,
        ufrag: str,
        password: str,
        now: float,
        advertised: Sequence[Addr] = (),
        offer_at: float | None = None,
        resource_id: str = "",
    ) -> None:
        """``advertised``: the relay addresses the answer names, most preferred first (its
        region's: ``transceiver.regions``); empty: ``context.advertise`` alone. ``offer_at``:
        when its POST arrived (time.monotonic()), for the connect breakdown. ``session_id`` is
        the call id the backend sees; ``resource_id`` the signed id of its WHIP URL, which
        names this transceiver as the owner (``common.sessionid``)."""
        self._context = context
        self._metrics = context.metrics
        self.id = session_id
        self.resource_id = resource_id
        self.ufrag = ufrag
        self.lifecycle = Lifecycle(now, context.limits, offer_at=offer_at)
        configuration = RTCConfiguration(iceServers=[], bundlePolicy=RTCBundlePolicy.MAX_BUNDLE)
        # The process's certificate from the start: aiortc would make one per call otherwise.
        self.pc = (
            RTCPeerConnection(configuration)
            if context.certificate is None
            else seam.peer_connection(configuration, context.certificate())
        )
        self._connect_started = seam.track_connect(self.pc)
        self.ice = SharedSocketConnection(
            ufrag,
            password,
            tuple(advertised) or (context.advertise,),
            send=lambda data, to: context.send(ufrag, data, to),
            on_selected=lambda client: context.on_selected(ufrag, client),
            advertised_tcp=context.advertise_tcp,
        )
        self.out_track = BackendAudioTrack(
            on_frame_out=self._audio_sent, encoder_settings=context.encoder_settings
        )
        self.backend: BackendSession | None = None
        self.audio_format = ""  # the backend's choice (transceiver.backend.AUDIO_FORMATS)
        self.channel: Any = None
        self.metadata: dict[str, str] = {}  # as the backend got it; a call that moves takes it
        self._pending_events: list[str] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._connect_task: asyncio.Task[Any] | None = None
        self.closed = asyncio.Event()
        self._inlet: inbound.BackendInlet | None = None  # inbound audio's end (_wire_audio)
        # The SSRCs the caller's SRTP may use (the offer's, then the first to authenticate).
        self.ssrcs = SsrcLatch()
        # The payload types the answer's audio m-line names: all the RTP the call takes.
        self.audio_types: frozenset[int] = frozenset()
        self._connect_reported = False
        # Set once another transceiver claimed this call's resume token: the call lives on
        # there, so however this session ends, it ends as "migrated" (the backend is told so).
        self.moved = False

    # -- set-up -------------------------------------------------------------------------------
    async def answer(
        self, offer_sdp: str, remote: str, metadata: dict[str, str], resumed: bool = False
    ) -> str:
        """Apply the offer, open the backend, and return the SDP answer. ``resumed``: the call
        moved here from another transceiver (its id is the call's own, the backend is told)."""
        pc = self.pc
        pc.on("datachannel", self._on_datachannel)
        pc.on("iceconnectionstatechange", self._on_ice_state)
        pc.on("connectionstatechange", self._on_connection_state)
        # aiortc answers the audio and the data channel; every other m-line is answered here,
        # inactive or rejected, on the one BUNDLE transport (transceiver.call.bundle).
        bundle = BundledOffer.read(offer_sdp)
        await pc.setRemoteDescription(RTCSessionDescription(bundle.peer_offer(), "offer"))
        self.ssrcs = SsrcLatch(offered_ssrcs(offer_sdp))
        if pc.sctp is not None:  # before the answer: it advertises our max-message-size
            seam.install_sctp(
                pc.sctp, self._context.sctp_limits, self._on_sctp_limit, self._on_sctp_drop
            )
        seam.install_ice(pc, self.ice)
        pc.addTrack(self.out_track)
        send, ufrag = self._context.send, self.ufrag
        # SRTP along the path ICE proved (none yet: the media socket drops and counts it).
        seam.install_sender(
            pc, self.out_track, self._context.audio_clock, lambda d: send(ufrag, d, None)
        )
        self.metadata = dict(metadata)
        info = SessionInfo(self.id, self._context.transceiver_id, remote, metadata, resumed)
        self.backend = await self._context.backend.open_session(
            info, self._emit_audio, self._emit_event, self._on_backend_failure
        )
        self._wire_audio(self.backend)
        self.backend.attach_playout(self.out_track.queued_frames)
        answer = await pc.createAnswer()
        await pc.setLocalDescription(answer)
        self._connect_task = self._connect_started()
        self.lifecycle.start_connecting(time.monotonic())
        answer_sdp = bundle.answer(pc.localDescription.sdp)
        self.audio_types = payload_types(answer_sdp, "audio")
        return answer_sdp

    def _wire_audio(self, backend: BackendSession) -> None:
        """Inbound and outbound audio in the format the backend chose for this session.

        Inbound, once and for the whole call: the receiver's packets go through
        ``InboundAudio`` straight to the backend (``inbound.BackendInlet``), never back through
        the session (the way, step by step: ``transceiver.call.inbound``); the direct path in
        front of it is wired when DTLS connects (``_take_rtp_directly``)."""
        audio_format = getattr(backend, "audio_format", None)
        if audio_format not in AUDIO_FORMATS:
            raise ValueError(
                f"backend session audio_format {audio_format!r} is not one of {AUDIO_FORMATS}"
            )
        sample_rate = getattr(backend, "sample_rate", AUDIO_SAMPLE_RATE)
        if audio_format == PCM16 and sample_rate not in SAMPLE_RATES:
            raise ValueError(
                f"backend session sample_rate {sample_rate!r} is not one of {SAMPLE_RATES}"
            )
        self.audio_format = audio_format
        rate = sample_rate if audio_format == PCM16 else AUDIO_SAMPLE_RATE
        self.out_track.set_format(audio_format, rate, ahead=getattr(backend, "audio_ahead", False))
        self._inlet = inlet = inbound.BackendInlet(
            self.id,
            backend,
            audio_format,
            count=self._metrics.audio_frames_in.inc,
            heard=self.lifecycle.audio_received,
            on_first=self._first_audio_in,
            on_failure=self._on_backend_failure,
        )
        path = inbound.InboundAudio(
            audio_format, inlet.frame, inlet.frame, self._on_jitter_event, rate
        )
        seam.install_receiver(self.pc, path)

    @property
    def frames_in(self) -> int:
        """The caller's audio frames handed to the backend."""
        return self._inlet.frames if self._inlet is not None else 0

    def _emit_audio(self, data: bytes) -> None:
        """The backend's audio sink: PCM (pcm16) or one Opus packet (opus) toward the caller."""
        if self.audio_format == OPUS:
            self.out_track.push_opus(data)
        else:
            self.out_track.push(data)

    def _first_audio_in(self) -> None:
        """The caller's first frame reached the backend: the connect breakdown, if audio
        already went toward the caller (else ``_audio_sent`` reports it)."""
        if self.lifecycle.first_audio_out_at is not None:
            self._report_connect()

    def _audio_sent(self) -> None:
        """A 20 ms frame of audio (not silence) went toward the caller."""
        self._metrics.audio_frames_out.inc()
        if self.lifecycle.first_audio_out_at is None:
            self.lifecycle.audio_sent(time.monotonic())
            if self.lifecycle.first_audio_in_at is not None:
                self._report_connect()

    def _report_connect(self) -> None:
        """The connect breakdown, once: when audio went both ways, or when the session ends
        (then with the steps it got to). Logged, and observed in the connect_phase histogram."""
        if self._connect_reported:
            return
        self._connect_reported = True
        phases = self.lifecycle.connect_phases()
        for phase, seconds in phases.items():
            self._metrics.connect_phase.labels(phase).observe(seconds)
        log.info(
            "session %s connect: %s",
            self.id,
            " ".join(f"{phase}={seconds * 1000:.1f}ms" for phase, seconds in phases.items()),
        )

    def _on_jitter_event(self, event: str, count: int) -> None:
        self._metrics.jitter_events.labels(event).inc(count)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- events from aiortc -------------------------------------------------------------------
    def _on_datachannel(self, channel: Any) -> None:
        if channel.label not in EVENTS_CHANNELS or self.channel is not None:
            return
        self.channel = channel
        channel.on("message", self._on_event_message)
        channel.on("open", self._flush_events)
        if channel.readyState == "open":
            self._flush_events()

    def _on_event_message(self, message: Any) -> None:
        if self.backend is None:
            return
        if isinstance(message, bytes) or len(message) > MAX_EVENT_BYTES:
            self._emit_event({"type": "error", "error": "events must be JSON text <= 16 KiB"})
            return
        try:
            event = json.loads(message)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self._emit_event({"type": "error", "error": "events must be JSON objects"})
            return
        self.backend.event_in(event)

    def _emit_event(self, event: dict[str, Any]) -> None:
        """An event from the backend: control events act here, all others go to the caller."""
        kind = event.get("type")
        if kind == CLEAR_AUDIO:
            self.out_track.clear()
            return
        if kind == HANGUP:
            self.end("backend_hangup")
            return
        text = json.dumps(event)
        if self.channel is not None and self.channel.readyState == "open":
            self.channel.send(text)
        elif len(self._pending_events) < MAX_PENDING_EVENTS:
            self._pending_events.append(text)

    def tell_caller(self, event: dict[str, Any]) -> bool:
        """An event from the transceiver itself (``session.migrate``) to the caller, now, if its
        data channel is open; False when it cannot hear it."""
        if self.channel is None or self.channel.readyState != "open":
            return False
        self.channel.send(json.dumps(event))
        return True

    def _flush_events(self) -> None:
        pending, self._pending_events = self._pending_events, []
        for text in pending:
            self.channel.send(text)

    def _on_sctp_limit(self, why: str) -> None:
        """The caller's SCTP went over a cap (``transceiver.call.sctp``): it ignores our window."""
        log.info("session %s: data channel %s", self.id, why)
        self.end("data_channel_limit")

    def _on_sctp_drop(self, reason: str, count: int) -> None:
        counter = self._metrics.data_channel_dropped
        if counter is not None:
            counter.labels(reason).inc(count)

    def _on_backend_failure(self, reason: str) -> None:
        self._metrics.backend_errors.inc()
        self.end("backend_error")

    def _on_ice_state(self) -> None:
        state = self.pc.iceConnectionState
        if state in ("checking", "new"):
            return
        if state in ("connected", "completed"):
            took = self.lifecycle.ice_connected(time.monotonic())
            if took is not None:
                self._metrics.ice_connected.observe(took)
        elif state in ("failed", "closed"):
            self.end("ice_failed")

    def _on_connection_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            took = self.lifecycle.dtls_connected(time.monotonic())
            if took is not None:
                self._metrics.dtls_connected.observe(took)
            self._take_rtp_directly()
        elif state == "failed":
            self.end("dtls_failed")
        elif state == "closed":
            self.end("peer_closed")

    def _take_rtp_directly(self) -> None:
        """SRTP is up: every inbound packet passes the call's SSRC latch first
        (``seam.latch_srtp``), and inbound RTP skips aiortc's DTLS queue
        (``inbound.direct_rtp``)."""
        transceivers = self.pc.getTransceivers()
        if not transceivers:
            return
        # BUNDLE (seam.install_ice): one DTLS transport carries every m-line.
        srtp = seam.latch_srtp(
            transceivers[0].receiver.transport, self.ssrcs, self._metrics.foreign_ssrc.inc
        )
        if srtp is None:
            return
        for transceiver in transceivers:
            receiver = transceiver.receiver
            if isinstance(receiver, seam.InlineAudioReceiver):
                self.ice.rtp_sink = inbound.direct_rtp(
                    receiver, srtp, self.audio_types, self._metrics.not_audio.inc
                )
                return

    # -- ending ----------------------------------------------------------------------------------
    def end(self, reason: str) -> None:
        """Start ending the session (idempotent); teardown runs in a task."""
        if self.moved:
            reason = "migrated"
        if self.lifecycle.close(time.monotonic(), reason):
            self._report_connect()
            log.info("session %s ending: %s", self.id, reason)
            asyncio.get_running_loop().create_task(self._teardown(reason))

    async def _teardown(self, reason: str) -> None:
        try:
            if self.backend is not None:
                await _quietly(self.backend.close(reason))
            self.out_track.stop()
            await _quietly(self.pc.close())
            # aiortc's connect task may still be starting RTP senders and receivers if the session
            # ended while it ran: let it finish, then stop whatever it started after close().
            if self._connect_task is not None:
                await _quietly(asyncio.shield(self._connect_task))
                for transceiver in self.pc.getTransceivers():
                    await _quietly(transceiver.sender.stop())
                    await _quietly(transceiver.receiver.stop())
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=2)
        finally:
            self.lifecycle.closed(time.monotonic())
            self._context.on_closed(self, reason)
            self.closed.set()

    @property
    def state(self) -> State:
        return self.lifecycle.state


async def _quietly(aw: Any) -> None:
    try:
        await asyncio.wait_for(aw, timeout=5)
    except (TimeoutError, Exception) as exc:  # teardown must finish whatever happens
        log.debug("teardown step failed: %r", exc)
