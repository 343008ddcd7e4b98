"""The transceiver process: one media socket, its sessions, the backend, the watchdog.

One asyncio process = one transceiver id = one UDP socket (DESIGN.md). Datagrams arrive either
encapsulated by a relay (first byte 0xFF) or raw from a client talking to the socket directly;
``Demux`` decides the session, replies follow the session's latched path.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import secrets
import socket
import time
from typing import Any

from aioice import stun as aioice_stun

from common import encap, stun
from common.config import ConfigError, load_keyring
from common.hint import NONCE_LEN, sign_hint
from common.sockets import set_buffers
from transceiver.backend import Backend, create_backend
from transceiver.config import TransceiverConfig
from transceiver.demux import Demux
from transceiver.ice import check_versions
from transceiver.metrics import TransceiverMetrics
from transceiver.session import Session

log = logging.getLogger("rtcedge.transceiver")

WATCHDOG_INTERVAL_S = 0.5
BINDING_REQUEST = stun.BINDING_REQUEST.to_bytes(2, "big")  # a STUN message's first two bytes
MAX_LOGGED_SESSION_ERRORS = 10  # then only counted (rtcedge_transceiver_dropped_datagrams_total)


class SessionLimitError(Exception):
    """No capacity (session limit reached, or draining)."""


class MediaSocket(asyncio.DatagramProtocol):
    """The shared UDP socket: decapsulate, demultiplex, and send along latched paths."""

    def __init__(
        self,
        demux: Demux[Session],
        metrics: TransceiverMetrics,
        relay_networks: tuple[str, ...] = (),
    ) -> None:
        self.demux = demux
        self.metrics = metrics
        self._relay_networks = [ipaddress.ip_network(n, strict=False) for n in relay_networks]
        self._relay_allowed: dict[str, bool] = {}
        self._session_errors = 0
        self.transport: asyncio.DatagramTransport | None = None
        self._headers: dict[tuple[str, int], bytes] = {}
        self._received = metrics.datagrams.labels("in")
        self._sent = metrics.datagrams.labels("out")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _drop(self, reason: str) -> None:
        self.metrics.dropped.labels(reason).inc()

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self._received.inc()
        relay: tuple[str, int] | None = None
        if data[:1] == b"\xff":
            try:
                family, packed, port, _hop, offset = encap.decode_packed(data)
            except encap.EncapError:
                self._drop("encap_malformed")
                return
            fam = socket.AF_INET if family == 4 else socket.AF_INET6
            client = (socket.inet_ntop(fam, packed), port)
            relay = (addr[0], addr[1])
            if self._relay_networks and not self._is_relay(addr[0]):
                self._drop("relay_not_allowed")
                return
            payload = data[offset:]
        else:
            if self._relay_networks:  # behind relays, nobody talks to the socket directly
                self._drop("direct_not_allowed")
                return
            client = (addr[0], addr[1])
            payload = data
        if not payload:
            self._drop("empty")
            return
        if payload[0] < 4:
            # Our strict parser first, then aioice's own, which raises struct.error (not
            # ValueError) on attributes of the wrong size that are well-formed TLVs (found by
            # fuzzing). STUN is rare (checks, consent): parsing it twice costs nothing.
            try:
                stun.parse(payload)
            except stun.StunError:
                self._drop("stun_malformed")
                return
            try:
                aioice_stun.parse_message(payload)
            except Exception:
                self._drop("stun_rejected_by_aioice")
                return
        route = self.demux.route(payload, client, relay)
        if route.session is None:
            self._drop(route.reason)
            return
        if route.learned:  # an authenticated check: the session's first-check deadline is met
            route.session.lifecycle.check_received(time.monotonic())
        try:
            route.session.ice.datagram_received(payload, client)
        except Exception:  # one bad datagram must never take the socket down
            self._drop("session_error")
            self._session_errors += 1
            if self._session_errors <= MAX_LOGGED_SESSION_ERRORS:  # no traceback spam
                log.exception("session %s rejected a datagram", route.session.id)

    def _is_relay(self, host: str) -> bool:
        allowed = self._relay_allowed.get(host)
        if allowed is None:
            ip = ipaddress.ip_address(host)
            allowed = any(ip in net for net in self._relay_networks)
            if len(self._relay_allowed) > 4096:
                self._relay_allowed.clear()
            self._relay_allowed[host] = allowed
        return allowed

    def send(self, ufrag: str, data: bytes, to: tuple[str, int] | None = None) -> None:
        """Send a session's datagram: STUN to the learned address ``to`` it answers or checks,
        anything else (DTLS, SRTP) along the path ICE last proved with a round trip."""
        if to is not None and data[:1] and data[0] < 4:
            # Our own checks spend the address's credit (no amplification toward an address
            # that never answers); answers go to any learned address, one per check it sent.
            if data[:2] == BINDING_REQUEST:
                path = self.demux.request_path(ufrag, to)
            else:
                path = self.demux.path_to(ufrag, to)
        else:
            path = self.demux.path(ufrag)
        if path is None or self.transport is None:
            self._drop("no_path")
            return
        self._sent.inc()
        if path.relay is None:
            self.transport.sendto(data, path.client)
            return
        header = self._headers.get(path.client)
        if header is None:
            header = encap.encode_header(path.client[0], path.client[1])
            if len(self._headers) > 65536:
                self._headers.clear()
            self._headers[path.client] = header
        self.transport.sendto(header + data, path.relay)


class TransceiverServer:
    def __init__(self, config: TransceiverConfig, backend: Backend | None = None) -> None:
        check_versions()
        self.config = config.validate()
        self.keyring = load_keyring(config.keyring_path, config.keyring_json)
        url = config.backend_url if config.backend == "websocket" else None
        self.backend = backend or create_backend(config.backend, url)
        self.metrics = TransceiverMetrics()
        self.demux: Demux[Session] = Demux(on_forget=lambda s, addr: s.ice.forget_address(addr))
        self.media = MediaSocket(self.demux, self.metrics, config.relay_networks)
        self.sessions: dict[str, Session] = {}
        self.draining = False
        self._transport: asyncio.DatagramTransport | None = None
        self._watchdog: asyncio.Task[None] | None = None

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
        self._transport, _ = await loop.create_datagram_endpoint(lambda: self.media, sock=sock)
        self._watchdog = loop.create_task(self._watch())

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

    async def create_session(
        self, offer_sdp: str, remote: str, metadata: dict[str, str]
    ) -> Session:
        if self.draining:
            raise SessionLimitError("draining: no new sessions")
        if len(self.sessions) >= self.config.max_sessions:
            raise SessionLimitError(f"session limit ({self.config.max_sessions}) reached")
        session_id = secrets.token_hex(16)
        ufrag = self.new_ufrag()
        password = base64.b64encode(secrets.token_bytes(18)).decode()  # 24 ice-chars, 144 bits
        session = Session(self, session_id, ufrag, password, time.monotonic())
        self.sessions[session_id] = session
        self.demux.add(ufrag, password, session)
        self.metrics.sessions_active.inc()
        self.metrics.sessions_started.inc()
        try:
            session.answer_sdp = await session.answer(offer_sdp, remote, metadata)
        except BaseException:
            session.end("error")
            await session.closed.wait()
            raise
        return session

    def forget(self, session: Session, reason: str) -> None:
        """Called once by a session's teardown: drop every table entry it had."""
        if self.sessions.pop(session.id, None) is not None:
            self.demux.remove(session.ufrag)
            self.metrics.sessions_active.dec()
            self.metrics.sessions_ended.labels(reason).inc()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                reason = session.lifecycle.due(now)
                if reason is not None:
                    session.end(reason)
            self.demux.expire(now, self.config.address_ttl_s)
            self.metrics.client_addresses.set(self.demux.addresses)

    # -- shutdown --------------------------------------------------------------------------------
    async def drain(self, grace_s: float | None = None) -> None:
        """Stop taking sessions; let live ones finish within the grace period, then end them."""
        self.draining = True
        grace = self.config.drain_grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace
        while self.sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await self.close()

    async def close(self) -> None:
        self.draining = True
        sessions = list(self.sessions.values())
        for session in sessions:
            session.end("shutdown")
        for session in sessions:
            await session.closed.wait()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._transport is not None:
            self._transport.close()
        await self.backend.close()
