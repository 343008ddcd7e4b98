"""The transceiver process: one media socket, its sessions, the backend, the watchdog.

One asyncio process = one transceiver id = one UDP socket (docs/design.md). Datagrams arrive either
encapsulated by a relay (first byte 0xFF) or raw from a client talking to the socket directly;
``transceiver.socket.classify`` decides the session (``Demux`` behind it),
``transceiver.socket.media`` is the socket, and replies follow the session's latched path. Sessions
are created here.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import socket
import time
from collections.abc import Callable

from common.addr import Addr, is_tcp
from common.config import ConfigError, load_keyring
from common.hint import NONCE_LEN, sign_hint
from common.resumetoken import NONCE_LEN as RESUME_NONCE_LEN
from common.resumetoken import ResumeTokenError, sign_resume_token, verify_resume_token
from common.sessionid import CALL_ID_LEN, sign_session_id
from common.sockets import set_buffers
from common.verdict import Refuse
from transceiver.backend import Backend
from transceiver.call import opus, seam
from transceiver.call.certificate import CertificateHolder
from transceiver.call.lifecycle import State
from transceiver.call.outbound import AudioClock
from transceiver.call.session import Session, SessionContext
from transceiver.config import TransceiverConfig
from transceiver.headroom import TICK_S, WINDOW_S, Headroom, no_capacity
from transceiver.metrics import TransceiverMetrics
from transceiver.migration import MIGRATE_EVENT, NO_SESSION, Migrations
from transceiver.socket.demux import Demux
from transceiver.socket.media import MediaSocket
from transceiver.socket.transport import DrainingTransport

WATCHDOG_INTERVAL_S = 0.5


# A resume offer for a call that is already here (it re-offered to the pod it is on).
ALREADY_HERE = Refuse("already_here", "offer rejected: the call to resume is already here", 400)


def warm_up() -> None:
    """What the first call would otherwise pay for, once per process, at start: libopus and
    libavfilter set themselves up on first use (measured 3-16 ms on the bench machine, on the
    event loop, in the first call's first audio frame each way)."""
    encoder, decoder = opus.Encoder(), opus.Decoder()
    for packet in [*encoder.encode(bytes(opus.RATE // 50 * 2)), opus.SILENCE_FRAME]:
        decoder.decode(packet)


class TransceiverServer:
    def __init__(self, config: TransceiverConfig, backend: Backend | None = None) -> None:
        seam.check()  # the aiortc/aioice internals the calls rely on (transceiver.call.seam)
        self.config = config.validate()
        self.keyring = load_keyring(config.keyring_path, config.keyring_json)
        self.backend = backend or config.make_backend()
        self.metrics = TransceiverMetrics()
        self.metrics.watch_backend(self.backend.counters)
        self.regions = config.region_table()
        for label in self.regions.labels:  # every region shows, at 0 until its first session
            self.metrics.region_sessions.labels(label)
        self.demux: Demux[Session] = Demux(on_forget=lambda s, addr: s.ice.forget_address(addr))
        self.media = MediaSocket(self.demux, self.metrics, config.relay_networks)
        self.sessions: dict[str, Session] = {}  # by call id (Session.id)
        self.router = config.session_router(self.keyring)  # WHIP resource id -> its owner
        self.draining = False
        # Calls offered a move on drain, and claimed (transceiver.migration). Moves are offered
        # only to a transceiver that knows its peers: a lone one has nowhere to move calls.
        self.migrations = Migrations(config.migrate_deadline_s)
        peers = config.peers()
        self.can_migrate = bool(set(peers.static) - {config.transceiver_id}) or bool(
            peers.dns_template
        )
        # One DTLS certificate for the process's sessions, a new one every day.
        self.certificates = CertificateHolder(time.monotonic())
        self._session_context = SessionContext(
            transceiver_id=config.transceiver_id,
            advertise=config.advertise,
            advertise_tcp=config.advertise_tcp,
            limits=config.lifecycle_limits(),
            backend=self.backend,
            metrics=self.metrics.for_sessions(),
            send=self.media.send,
            on_selected=self._selected,
            on_closed=self._forget,
            audio_clock=AudioClock(),
            certificate=lambda: self.certificates.current(time.monotonic()),
            sctp_limits=config.sctp_limits(),
            encoder_settings=config.opus_settings(),
        )
        self.headroom = Headroom(config.load_limits())
        self._transport: DrainingTransport | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._load_sampler: asyncio.Task[None] | None = None

    @property
    def media_address(self) -> tuple[str, int]:
        assert self._transport is not None
        return self._transport.get_extra_info("sockname")[:2]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in self.config.media[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        set_buffers(sock, 4 << 20)
        try:
            sock.bind(self.config.media)
        except OSError as exc:
            sock.close()
            raise ConfigError(
                "--media", f"cannot bind {self.config.media}: {exc.strerror}"
            ) from None
        edge = DrainingTransport(sock, self.media, on_drop=self.media.drop)
        edge.start()
        self._transport = edge
        warm_up()
        self._watchdog = loop.create_task(self._watch())
        self._load_sampler = loop.create_task(self._sample_load())

    # -- sessions ------------------------------------------------------------------------------
    def new_ufrag(self) -> str:
        while True:
            ufrag = sign_hint(
                self.keyring,
                self.config.cluster,
                self.config.transceiver_id,
                time.time(),
                secrets.token_bytes(NONCE_LEN),
            )
            if ufrag not in self.demux:  # 56 random bits: a clash is next to impossible
                return ufrag

    def capacity_refusal(self, now: float | None = None, pending: int = 0) -> Refuse | None:
        """Why a new session would be refused now (draining, the session limit, or no headroom:
        ``transceiver.headroom``), else None. ``now``: time.monotonic(), read if not given.

        The one capacity rule, decided once per offer: by WHIP's admission before it reads the
        offer (``transceiver.signaling.admission``), with the ``pending`` offers it admitted
        that are not sessions yet; ``create_session`` does not ask again. Sessions count from the
        moment they are created, connecting ones included, and admitted offers before that, so
        offers admitted at once cannot overshoot. Readiness asks it too.
        """
        retry_s = self.config.load_limits().retry_after_s
        if self.draining:
            return no_capacity("draining", "draining: no new sessions", retry_s)
        sessions = len(self.sessions) + pending
        if sessions >= self.config.max_sessions:
            return no_capacity("max_sessions", "session limit reached", retry_s)
        now = time.monotonic() if now is None else now
        return self.headroom.refusal(sessions, self.unsettled(now) + pending)

    def unsettled(self, now: float) -> int:
        """Live sessions whose cost the load window does not show yet: still connecting, or
        connected less than a window ago."""
        count = 0
        for session in self.sessions.values():
            connected_at = session.lifecycle.dtls_connected_at
            if session.state in (State.NEW, State.CONNECTING) or (
                session.state is State.CONNECTED
                and (connected_at is None or now - connected_at < WINDOW_S)
            ):
                count += 1
        return count

    async def create_session(
        self,
        offer_sdp: str,
        remote: str,
        metadata: dict[str, str],
        region_header: str | None = None,
        offer_at: float | None = None,
        resume_of: str | None = None,
        on_registered: Callable[[], None] | None = None,
    ) -> Session | Refuse:
        """Where a session is created: credentials, table entries, then its SDP answer; the
        offer was admitted (``capacity_refusal``) and checked (``check_offer``) before.

        ``remote`` is the client's address as the HTTP layer determined it; ``region_header``
        the value of --region-header, only if a trusted proxy set it. Both choose the relay
        addresses the answer advertises (``transceiver.regions``). ``offer_at``: when the
        POST arrived (time.monotonic()), the start of the session's connect breakdown.
        ``resume_of``: the call id of a call that moves here (its resume token was claimed
        from its owner): the session takes it, and the backend is told it is resumed, unless
        the call is here already (``ALREADY_HERE``). ``on_registered`` is called once the
        session is in the table (where capacity counts it from then on). What aiortc refuses
        of the offer raises ValueError; a backend that cannot be reached, BackendError.
        """
        if resume_of is not None and resume_of in self.sessions:
            return ALREADY_HERE
        choice = self.regions.choose(region_header, remote)
        session_id = resume_of or secrets.token_hex(CALL_ID_LEN)
        resource_id = sign_session_id(
            self.keyring, self.config.cluster, self.config.transceiver_id, time.time(), session_id
        )
        ufrag = self.new_ufrag()
        password = base64.b64encode(secrets.token_bytes(18)).decode()  # 24 ice-chars, 144 bits
        session = Session(
            self._session_context,
            session_id,
            ufrag,
            password,
            time.monotonic(),
            advertised=choice.addresses,
            offer_at=offer_at,
            resource_id=resource_id,
        )
        self.sessions[session_id] = session
        if on_registered is not None:
            on_registered()
        self.demux.add(ufrag, password, session)
        self._count_sessions()
        self.metrics.sessions_started.inc()
        self.metrics.region_sessions.labels(choice.region).inc()
        try:
            session.answer_sdp = await session.answer(
                offer_sdp, remote, metadata, resumed=resume_of is not None
            )
        except BaseException:
            session.end("error")
            await session.closed.wait()
            raise
        if resume_of is not None:
            self.metrics.migrations_resumed.inc()
        return session

    def _selected(self, ufrag: str, client: Addr) -> bool:
        """ICE proved a path to ``client``: media goes there (the demultiplexer), counted by
        the client's transport."""
        moved = self.demux.select(ufrag, client)
        if moved:
            self.metrics.paths_selected.labels("tcp" if is_tcp(client) else "udp").inc()
        return moved

    def _forget(self, session: Session, reason: str) -> None:
        """Called once by a session's teardown (its on_closed): drop every entry it had."""
        if self.sessions.pop(session.id, None) is not None:
            self.demux.remove(session.ufrag)
            self._count_sessions()
            self.metrics.sessions_ended.labels(reason).inc()
            outcome = self.migrations.forget(session.id)
            if outcome == "claimed":  # the caller hung up the old call: it has moved
                self.metrics.migrations_completed.inc()
            elif outcome is not None:  # "offered" (never claimed) or "overdue"
                reason = "unclaimed" if outcome == "offered" else "not_switched"
                self.metrics.migrations_failed.labels(reason).inc()

    def _count_sessions(self) -> None:
        """The gauges of live sessions, after one started or ended: how many, and how full."""
        self.metrics.sessions_active.set(len(self.sessions))
        self.metrics.session_utilization.set(len(self.sessions) / self.config.max_sessions)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                reason = session.lifecycle.due(now)
                if reason is not None:
                    session.end(reason)
            for call_id in self.migrations.due(now):  # moved, yet the caller kept the old call
                session = self.sessions.get(call_id)
                if session is not None:
                    session.end("migrated")
            self.demux.expire(now, self.config.address_ttl_s)
            self.metrics.client_addresses.set(self.demux.addresses)

    async def _sample_load(self) -> None:
        """The estimator's I/O: how late this timer fires (the loop's lag) and the process's
        CPU time, every TICK_S; and the same figures as gauges."""
        loop = asyncio.get_running_loop()
        m = self.metrics
        while True:
            expected = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            now = loop.time()
            self.headroom.sample(now, now - expected, time.process_time())
            m.loop_lag.set(self.headroom.loop_lag_ms / 1000)
            m.cpu_ratio.set(self.headroom.cpu_pct / 100)
            m.sessions_unsettled.set(self.unsettled(time.monotonic()))
            m.overloaded.set(int(self.headroom.overloaded))

    # -- moving calls ------------------------------------------------------------------------------
    def offer_migrations(self, drain_ends_at: float) -> int:
        """Ask each caller whose data channel is open, and who was not asked yet, to move
        (``session.migrate`` with a resume token): how many were asked. A caller that does not
        know the event ignores it and drains as before."""
        if not self.can_migrate:
            return 0
        now, wall = time.monotonic(), time.time()
        deadline_s = min(self.config.migrate_deadline_s, max(0.0, drain_ends_at - now))
        asked = 0
        for session in list(self.sessions.values()):
            if self.migrations.offered(session.id) or session.state is not State.CONNECTED:
                continue
            nonce = secrets.token_bytes(RESUME_NONCE_LEN)
            token = sign_resume_token(
                self.keyring,
                self.config.cluster,
                self.config.transceiver_id,
                wall + deadline_s,
                session.id,
                nonce,
            )
            event = {
                "type": MIGRATE_EVENT,
                "resume_token": token,
                "deadline_ms": int(deadline_s * 1000),
            }
            if session.tell_caller(event):
                self.migrations.offer(session.id, nonce, now)
                self.metrics.migrations_offered.inc()
                asked += 1
        return asked

    def claim_migration(self, token: str) -> tuple[str, dict[str, str]] | Refuse:
        """The owner's side of a claim (the internal endpoint): the call id and the metadata
        its backend got, once per token; else why not (a reason of CLAIM_REFUSALS, or the
        token's own: ``common.resumetoken``). The old session then ends when its caller hangs
        it up, or ``--migrate-deadline`` after this claim."""
        try:
            verified = verify_resume_token(
                self.keyring, token, time.time(), self.config.migrate_deadline_s
            )
        except ResumeTokenError as exc:
            return Refuse(exc.reason)
        if verified.owner != (self.config.cluster, self.config.transceiver_id):
            return NO_SESSION
        session = self.sessions.get(verified.call_id)
        live = session is not None and session.state not in (State.CLOSING, State.CLOSED)
        refused = self.migrations.claim(verified.call_id, verified.nonce, time.monotonic(), live)
        if isinstance(refused, Refuse):
            return refused
        assert session is not None  # live
        session.moved = True
        self.metrics.migrations_claimed.inc()
        return session.id, dict(session.metadata)

    # -- shutdown --------------------------------------------------------------------------------
    async def drain(self, grace_s: float | None = None) -> None:
        """Stop taking sessions; ask callers to move (``offer_migrations``: callers whose data
        channel opens during the drain are asked then); let live calls finish or move within
        the grace period, then end them."""
        self.draining = True
        grace = self.config.drain_grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace
        while self.sessions and time.monotonic() < deadline:
            self.offer_migrations(deadline)
            await asyncio.sleep(0.1)
        await self.close()

    async def close(self) -> None:
        self.draining = True
        sessions = list(self.sessions.values())
        for session in sessions:
            session.end("shutdown")
        for session in sessions:
            await session.closed.wait()
        for task in (self._watchdog, self._load_sampler):
            if task is not None:
                task.cancel()
        self._session_context.audio_clock.close()
        if self._transport is not None:
            self._transport.close()
        await self.backend.close()
