"""The relay supervisor: owns every socket and shared mapping, forks and pins the workers.

Sockets are created once, before any worker exists, and never closed while the relay runs. A
worker that dies is replaced by a fork that inherits the very same public and internal sockets,
flow journal and counters (docs/design.md): the SO_REUSEPORT group never changes, so the kernel
keeps hashing each client to the same socket, and datagrams that queued during the gap are read
by the replacement instead of being lost. Restarts back off exponentially when a worker keeps
crashing.

SIGTERM/SIGINT stop the workers and exit; SIGHUP reloads the keyring and the allowlist, which
reach the workers through the control block without touching their flows.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from common.config import ConfigError
from common.lifetime import die_with_parent
from common.sockets import set_buffers
from relay import counters as C
from relay.allowlist import AllowlistResolver, load_routing
from relay.config import RelayConfig
from relay.control import ControlBlock, RoutingConfig
from relay.counters import CONFIG_GENERATION, PEER_EDGE, PEER_ROUTES, PEER_TRANSCEIVER, CounterArea
from relay.dropnotice import DENIED_ADVICE, DropNotice
from relay.journal import FlowJournal
from relay.mmsg import SOCKADDR_LEN
from relay.portclaim import Holder, could_share_port, drain, try_claim
from relay.tcpconns import CLOSE_INDEX
from relay.worker import Worker

log = logging.getLogger("rtcedge.relay")

_SUPERVISOR_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
CRASH_LOOP_S = 1.0  # a worker that dies sooner than this after starting is crash-looping
BACKOFF_FIRST_S = 0.05
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2  # linux/in.h; not exported by Python's socket module
TCP_BACKLOG = 1024  # per worker; the kernel caps it at net.core.somaxconn
# Every slot counting a refusal for a denied client address: UDP and TCP frames, TCP accepts.
DENIED_SLOTS = (
    C.DROPS + C.DROP_INDEX["denied_address"],
    C.TCP_DROPS + C.DROP_INDEX["denied_address"],
    C.TCP_CLOSED + CLOSE_INDEX["denied_address"],
)


@dataclass
class WorkerSlot:
    index: int
    cpu: int | None
    pid: int = 0
    started_at: float = 0.0
    restarts: int = 0
    consecutive_crashes: int = 0
    restart_at: float | None = None


@dataclass
class SupervisorState:
    """What the supervisor itself reports besides the workers' shared counters."""

    slots: list[WorkerSlot] = field(default_factory=list)
    reloads: int = 0
    reload_errors: int = 0
    transceivers: int = 0
    resolver: AllowlistResolver | None = None

    serving: Callable[[int], bool] | None = None  # worker index -> has it entered its loop?

    def alive(self) -> int:
        """Workers running and serving (they applied the current routing configuration)."""
        return sum(
            1 for s in self.slots if s.pid and (self.serving is None or self.serving(s.index))
        )

    def metrics(self) -> Iterator:
        restarts = CounterMetricFamily(
            "rtcedge_relay_worker_restarts", "Workers restarted after exiting.", labels=["worker"]
        )
        for s in self.slots:
            restarts.add_metric([str(s.index)], s.restarts)
        yield restarts
        yield GaugeMetricFamily(
            "rtcedge_relay_workers_alive", "Workers running.", value=self.alive()
        )
        yield GaugeMetricFamily(
            "rtcedge_relay_allowlist_transceivers",
            "Transceivers in the allowlist.",
            value=self.transceivers,
        )
        yield CounterMetricFamily(
            "rtcedge_relay_config_reloads", "Routing configuration reloads.", value=self.reloads
        )
        yield CounterMetricFamily(
            "rtcedge_relay_config_reload_errors",
            "Reloads that failed and kept the previous configuration.",
            value=self.reload_errors,
        )
        errors = self.resolver.errors if self.resolver else 0
        yield CounterMetricFamily(
            "rtcedge_relay_dns_errors", "Failed transceiver name lookups.", value=errors
        )


def claim_port(config: RelayConfig) -> socket.socket | None:
    """Claim the public port (relay.portclaim), or refuse to share it with a foreign relay.

    None when another relay holds the claim and ``--takeover`` says this one replaces it (the
    supervisor claims the port once that relay is gone), or when the holder cannot share the
    port with us anyway (another uid: the kernel would refuse the bind itself).
    """
    host, port = config.listen
    got = try_claim(config.family, port)
    if not isinstance(got, Holder):
        return got
    shown = f"[{host}]:{port}" if config.family == socket.AF_INET6 else f"{host}:{port}"
    if not could_share_port(got):
        log.warning(
            "the claim of %s is held by uid %d (%s): ignored", shown, got.uid, got.describe()
        )
    elif config.takeover:
        log.warning(
            "--takeover: sharing %s with the relay holding it (%s) until it stops",
            shown,
            got.describe(),
        )
    else:
        raise ConfigError(
            "--listen",
            f"another relay ({got.describe()}) already serves UDP port {port} "
            f"(IPv{6 if config.family == socket.AF_INET6 else 4}); listening on {shown} beside it "
            "would silently split its clients between the two. Stop it, or pass --takeover "
            "(RTCEDGE_TAKEOVER=1) if this relay replaces it",
        )
    return None


def _udp_socket(family: int, config: RelayConfig, reuseport: bool) -> socket.socket:
    """A non-blocking UDP socket with the relay's buffers, not bound yet."""
    s = socket.socket(family, socket.SOCK_DGRAM)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.setblocking(False)
    set_buffers(s, config.socket_buffer_bytes)
    if family == socket.AF_INET:
        # Don't-fragment: WebRTC keeps datagrams far below any MTU (browsers send <= ~1200 B),
        # and with DF set the kernel skips IP ID generation per packet.
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    return s


def open_peer_sockets(config: RelayConfig) -> list[socket.socket | None]:
    """Per worker, its socket of the --peer-listen SO_REUSEPORT group (None without one)."""
    if config.peer_listen is None:
        return [None] * config.workers
    socks: list[socket.socket | None] = []
    for _ in range(config.workers):
        s = _udp_socket(config.peer_family, config, reuseport=True)
        try:
            s.bind(config.peer_listen)
        except OSError as exc:
            raise ConfigError(
                "--peer-listen", f"cannot bind {config.peer_listen}: {exc.strerror}"
            ) from None
        socks.append(s)
    return socks


def open_tcp_listeners(config: RelayConfig) -> list[socket.socket | None]:
    """Per worker, its listening socket of the --listen-tcp SO_REUSEPORT group (None without
    one). Kept open by the supervisor like the UDP sockets: a replacement worker accepts the
    connections that queued while its predecessor was gone (those it had accepted are lost)."""
    if config.listen_tcp is None:
        return [None] * config.workers
    socks: list[socket.socket | None] = []
    for _ in range(config.workers):
        s = socket.socket(config.family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if config.family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setblocking(False)
        try:
            s.bind(config.listen_tcp)
            s.listen(TCP_BACKLOG)
        except OSError as exc:
            raise ConfigError(
                "--listen-tcp", f"cannot listen on {config.listen_tcp}: {exc.strerror}"
            ) from None
        socks.append(s)
    return socks


def _raise_open_files_limit() -> None:
    """TCP connections are descriptors (--tcp-max-connections per worker): raise the soft limit
    on open files to the hard one, which containers often leave at 1024 against a hard 1M."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def open_sockets(config: RelayConfig) -> list[tuple[socket.socket, socket.socket]]:
    """One (public, internal) pair per worker; errors name the option that caused them."""
    pairs = []
    for i in range(config.workers):
        pub = _udp_socket(config.family, config, reuseport=True)
        internal = _udp_socket(config.internal_family, config, reuseport=False)
        try:
            pub.bind(config.listen)
        except OSError as exc:
            raise ConfigError("--listen", f"cannot bind {config.listen}: {exc.strerror}") from None
        port = config.internal_port_base + i
        try:
            internal.bind((config.internal_host, port))
        except OSError as exc:
            raise ConfigError(
                "--internal", f"cannot bind {config.internal_host}:{port}: {exc.strerror}"
            ) from None
        pairs.append((pub, internal))
    return pairs


def counted_peers(config: RelayConfig) -> tuple[int, ...]:
    """The metrics' peer label values this configuration can count (relay.counters)."""
    peers = [PEER_TRANSCEIVER]
    if config.peer_listen is not None:
        peers.append(PEER_EDGE)
    peers += [PEER_ROUTES + c for c in sorted(config.routes)]
    return tuple(peers)


class Supervisor:
    def __init__(self, config: RelayConfig) -> None:
        self.config = config.validate()
        self.resolver = AllowlistResolver(config)
        self.routing = load_routing(config, self.resolver, time.monotonic())
        self.claim = claim_port(config)  # before binding: refuse a foreign relay's port
        self.sockets = open_sockets(config)
        self.peer_sockets = open_peer_sockets(config)
        self.tcp_listeners = open_tcp_listeners(config)
        if config.listen_tcp is not None:
            _raise_open_files_limit()
        self.counters = CounterArea(config.workers)
        self.journals = [FlowJournal(config.limits.max_confirmed_flows) for _ in self.sockets]
        # A cluster relay's peer flows (relay.edgeflows), with the edge's sockaddr in each record.
        self.peer_journals: list[FlowJournal | None] = [None] * len(self.sockets)
        if config.peer_listen is not None:
            edge_len = SOCKADDR_LEN[config.peer_family]
            self.peer_journals = [
                FlowJournal(config.limits.max_confirmed_flows, extra_len=edge_len)
                for _ in self.sockets
            ]
        self.control = ControlBlock()
        self._publish(self.routing)
        cpus = sorted(os.sched_getaffinity(0))
        self.state = SupervisorState(
            slots=[
                WorkerSlot(i, cpus[i % len(cpus)] if config.pin else None)
                for i in range(config.workers)
            ],
            resolver=self.resolver,
        )
        self.state.transceivers = len(self.routing.transceivers)
        self.state.serving = self._serving
        self.http = None
        if config.metrics:
            from relay.http import make_http_server

            try:
                self.http = make_http_server(
                    config.metrics,
                    self.counters,
                    self.state,
                    counted_peers(config),
                    tcp=config.listen_tcp is not None,
                    limits=config.metrics_limits,
                )
            except OSError as exc:
                raise ConfigError(
                    "--metrics", f"cannot listen on {config.metrics}: {exc.strerror}"
                ) from None
        self.pid = os.getpid()
        self._stop = False
        self._reload = False
        self._lock = threading.Lock()  # serialises publications from SIGHUP and the DNS thread
        self.denied_notice = DropNotice(
            "from denied client addresses (denied_address)", DENIED_ADVICE
        )

    @property
    def addresses(self) -> dict[str, object]:
        addresses: dict[str, object] = {
            "public": self.sockets[0][0].getsockname()[:2],
            "internal": [s[1].getsockname()[:2] for s in self.sockets],
        }
        peer = self.peer_sockets[0]
        if peer is not None:
            addresses["peer"] = peer.getsockname()[:2]
        tcp = self.tcp_listeners[0]
        if tcp is not None:
            addresses["tcp"] = tcp.getsockname()[:2]
        return addresses

    def _publish(self, routing: RoutingConfig) -> None:
        self.control.publish(routing.to_json())

    # -- workers ---------------------------------------------------------------------------------
    def _serving(self, index: int) -> bool:
        # A worker publishes the control-block generation it applied just before its loop.
        return self.counters.block(index)[CONFIG_GENERATION] == self.control.generation()

    def _spawn(self, slot: WorkerSlot) -> None:
        self.counters.block(slot.index)[CONFIG_GENERATION] = 0  # not serving until it says so
        # Block the supervisor's signals across fork: a child must never run the supervisor's
        # handlers (a SIGTERM there would be swallowed); it starts with the default actions.
        signal.pthread_sigmask(signal.SIG_BLOCK, _SUPERVISOR_SIGNALS)
        pid = os.fork()
        if pid == 0:
            for sig in _SUPERVISOR_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SUPERVISOR_SIGNALS)
        if pid:
            slot.pid = pid
            slot.started_at = time.monotonic()
            slot.restart_at = None
            return
        code = 0
        try:
            self._become_worker(slot)
        except BaseException:
            log.exception("relay worker %d failed", slot.index)
            code = 1
        finally:
            os._exit(code)

    def _become_worker(self, slot: WorkerSlot) -> None:
        # Die with the supervisor (SIGKILLed or crashed): a replacement relay must not find
        # orphaned workers still holding the public port's SO_REUSEPORT group.
        die_with_parent(self.pid)
        if slot.cpu is not None:
            os.sched_setaffinity(0, {slot.cpu})
        for i, (pub, internal) in enumerate(self.sockets):
            if i != slot.index:
                pub.close()
                internal.close()
                peer = self.peer_sockets[i]
                if peer is not None:
                    peer.close()
                tcp = self.tcp_listeners[i]
                if tcp is not None:
                    tcp.close()
        if self.http is not None:
            self.http.socket.close()  # the supervisor's; a worker serves no HTTP
        if self.claim is not None:
            self.claim.close()  # the supervisor's; the claim lives exactly as long as it does
        pub, internal = self.sockets[slot.index]
        worker = Worker(
            slot.index,
            self.config,
            pub,
            internal,
            self.counters.block(slot.index),
            self.journals[slot.index],
            self.control,
            peer=self.peer_sockets[slot.index],
            peer_journal=self.peer_journals[slot.index],
            tcp_listener=self.tcp_listeners[slot.index],
        )
        gc.freeze()
        worker.run()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for slot in self.state.slots:
                if slot.pid != pid:
                    continue
                slot.pid = 0
                if self._stop:
                    break
                lived = time.monotonic() - slot.started_at
                # A worker that served a while is restarted at once (queued datagrams wait in the
                # inherited socket); only one that dies right after starting backs off.
                slot.consecutive_crashes = (
                    slot.consecutive_crashes + 1 if lived < CRASH_LOOP_S else 1
                )
                # The first restart is immediate: queued datagrams wait in the inherited socket.
                delay = 0.0
                if slot.consecutive_crashes > 1:
                    delay = min(
                        self.config.restart_backoff_max_s,
                        BACKOFF_FIRST_S * 2 ** (slot.consecutive_crashes - 2),
                    )
                slot.restart_at = time.monotonic() + delay
                slot.restarts += 1
                log.warning(
                    "relay worker %d (pid %d) exited with status %#x; restarting in %.2fs",
                    slot.index,
                    pid,
                    status,
                    delay,
                )

    # -- configuration ---------------------------------------------------------------------------
    def reload(self) -> None:
        """SIGHUP: re-read the keyring and re-resolve the allowlist; keep the old on failure."""
        with self._lock:
            try:
                routing = load_routing(self.config, self.resolver, time.monotonic())
            except ConfigError as exc:
                self.state.reload_errors += 1
                log.error("reload failed, keeping the previous configuration: %s", exc)
                return
            self.routing = routing
            self._publish(routing)
            self.state.reloads += 1
            self.state.transceivers = len(routing.transceivers)
            log.info("reloaded: %d transceivers", len(routing.transceivers))

    def _dns_loop(self) -> None:
        while not self._stop:
            time.sleep(self.config.dns_interval_s)
            with self._lock:
                transceivers = self.resolver.refresh(time.monotonic())
                if transceivers != self.routing.transceivers:
                    self.routing = RoutingConfig(
                        self.routing.keyring, transceivers, self.routing.routes
                    )
                    self._publish(self.routing)
                    self.state.transceivers = len(transceivers)

    # -- main loop -------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        elif signum in (signal.SIGTERM, signal.SIGINT):
            self._stop = True

    def serve(self, on_ready: object = None) -> None:
        """Fork the workers and supervise them until SIGTERM/SIGINT."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        self._start_serving()
        if callable(on_ready):
            on_ready(self)
        try:
            while not self._stop:
                self._supervise_once(wake_r)
        finally:
            self._shutdown()
            if self.http is not None:
                self.http.shutdown()

    def _start_serving(self) -> None:
        """The workers first, then the threads the supervisor alone runs."""
        for slot in self.state.slots:
            self._spawn(slot)
        if self.http is not None:
            from relay.http import serve_in_thread

            serve_in_thread(self.http)  # after forking: workers never run its thread
        if self.config.transceiver_dns:
            threading.Thread(target=self._dns_loop, name="dns", daemon=True).start()
        log.info(
            "relay listening on %s with %d workers, internal %s",
            self.addresses["public"],
            self.config.workers,
            self.addresses["internal"],
        )
        if "tcp" in self.addresses:
            log.info("relay accepting ICE over TCP on %s", self.addresses["tcp"])

    def _supervise_once(self, wake_r: int) -> None:
        """One turn: wait for a signal, the claim or the next restart; then reap, reload and
        restart what is due."""
        pending = [s.restart_at for s in self.state.slots if s.restart_at is not None]
        timeout = max(0.0, min(pending) - time.monotonic()) if pending else 1.0
        readable, _, _ = select.select(
            [wake_r] + ([self.claim] if self.claim else []), [], [], timeout
        )
        if self.claim is not None and self.claim in readable:
            drain(self.claim)
        elif self.claim is None:
            self._retake_claim()
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
        self._reap()
        if self._reload:
            self._reload = False
            self.reload()
        self._restart_due(time.monotonic())
        self._notice_drops(final=False)

    def _notice_drops(self, final: bool) -> None:
        """Log the denied-address drops (relay.dropnotice): rate-limited; at stop, the rest."""
        total = sum(self.counters.total(slot) for slot in DENIED_SLOTS)
        notice = self.denied_notice
        line = (notice.flush if final else notice.observe)(total, time.monotonic())
        if line is not None:
            log.warning("%s", line)

    def _restart_due(self, now: float) -> None:
        """Respawn the workers whose restart backoff has passed (none once stopping)."""
        for slot in self.state.slots:
            if not self._stop and slot.restart_at is not None and slot.restart_at <= now:
                self._spawn(slot)

    def _retake_claim(self) -> None:
        """After a --takeover: claim the port once the relay that held it has stopped."""
        got = try_claim(self.config.family, self.config.listen[1])
        if not isinstance(got, Holder):
            self.claim = got
            log.info("the public port's claim is ours now")

    def _shutdown(self, grace_s: float = 5.0) -> None:
        for slot in self.state.slots:
            if slot.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(s.pid for s in self.state.slots) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)
        for slot in self.state.slots:
            if slot.pid:
                os.kill(slot.pid, signal.SIGKILL)
                os.waitpid(slot.pid, 0)
                slot.pid = 0
        self._notice_drops(final=True)
        log.info("relay stopped")
