"""Real processes and sockets around a relay: what the benchmarks, ``rtcedge up`` and tests run.

- ``RelayProcess`` runs ``relay serve`` as a child process and finds its workers.
- ``StandInTransceiver`` is the transceiver end of the encapsulation, minus WebRTC: it answers
  every Binding request with a Binding success (which confirms the flow at the relay) and echoes
  every other payload back, prefixed with its own id so a test can tell who answered.
- ``hint_request`` builds the first packet of a flow: a Binding request whose USERNAME carries a
  signed hint.
"""

from __future__ import annotations

import collections
import contextlib
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.processes import stop_process
from bench.harness.procfs import udp_socket_rows
from common import encap, stun
from common.config import format_host_port
from common.hint import NONCE_LEN, Keyring, sign_hint
from common.lifetime import parent_death_preexec
from common.sockets import set_buffers
from relay.addresspolicy import LOOPBACK_NETWORKS


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(family_of(host), kind) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def family_of(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


@contextlib.contextmanager
def started_in_order(*processes: Any) -> Iterator[None]:
    """Start ``processes`` (each with ``start``/``stop``) one after another; on the way out,
    stop those that started, last first, whatever happened in between."""
    started: list[Any] = []
    try:
        for process in processes:
            process.start()
            started.append(process)
        yield
    finally:
        for process in reversed(started):
            process.stop()


def free_port_range(host: str, count: int) -> int:
    """A base port such that base..base+count-1 are free for UDP right now."""
    for _ in range(200):
        base = free_port(host)
        if base + count > 65535:
            continue
        socks = []
        try:
            for i in range(count):
                s = socket.socket(family_of(host), socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((host, base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def hint_request(
    keyring: Keyring,
    cluster: int,
    transceiver_id: int,
    now_s: float | None = None,
    client_ufrag: str = "cli0",
) -> tuple[bytes, str]:
    """A Binding request to the transceiver's signed ufrag; returns (packet, ufrag)."""
    ufrag = sign_hint(
        keyring,
        cluster,
        transceiver_id,
        time.time() if now_s is None else now_s,
        secrets.token_bytes(NONCE_LEN),
    )
    packet = stun.binding_request(f"{ufrag}:{client_ufrag}", secrets.token_bytes(12))
    return packet, ufrag


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@dataclass
class RelayProcess:
    """``relay serve`` in a child process, on loopback, with a generated keyring."""

    transceivers: dict[int, tuple[str, int]]
    workers: int = 2
    cluster: int = 7
    host: str = "127.0.0.1"
    public_host: str | None = None  # the listen address family may differ from the internal one
    keyring: Keyring = field(default_factory=lambda: Keyring.generate(1))
    # Read by the relay from this file (``--keyring``) instead of the environment, e.g. to test
    # a SIGHUP reload. Either way the secret never appears on the command line (``ps``).
    keyring_path: str | None = None
    # Local mode: loopback clients are allowed past the relay's built-in denied ranges.
    allow_networks: tuple[str, ...] = LOOPBACK_NETWORKS
    extra_args: list[str] = field(default_factory=list)
    # RTCEDGE_* variables for the child: values that may hold a credential (a Redis URL with a
    # password) go here, never into extra_args, whose command line every local user reads.
    extra_env: dict[str, str] = field(default_factory=dict)
    pin: bool = True
    quiet: bool = True  # capture stderr (tests); False lets the child log to ours
    # SIGTERM to the relay when the thread that started it exits, however (``rtcedge up``):
    # common/lifetime.py. Off by default: the benchmarks start relays from worker threads.
    die_with_parent: bool = False
    # Relay tiers: cluster id -> relay ingress addresses (``--route``); and, when given, the
    # edges' networks this relay takes encapsulated datagrams from at ``peer_address``.
    routes: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    peer_networks: tuple[str, ...] = ()
    # ICE over TCP: also listen on a TCP port of the public host (``--listen-tcp``).
    tcp: bool = False

    def __post_init__(self) -> None:
        self.public_host = self.public_host or self.host
        self.port = free_port(self.public_host)
        self.tcp_port = free_port(self.public_host, socket.SOCK_STREAM) if self.tcp else 0
        self.peer_port = free_port(self.host) if self.peer_networks else 0
        self.internal_base = free_port_range(self.host, self.workers)
        self.metrics_port = free_port(self.host, socket.SOCK_STREAM)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return (self.public_host, self.port)  # type: ignore[return-value]

    @property
    def tcp_address(self) -> tuple[str, int]:
        """Where clients connect for ICE over TCP; only with ``tcp``."""
        return (self.public_host, self.tcp_port)  # type: ignore[return-value]

    def internal_address(self, worker: int) -> tuple[str, int]:
        return (self.host, self.internal_base + worker)

    @property
    def peer_address(self) -> tuple[str, int]:
        """Where edges send to (``--peer-listen``); only with ``peer_networks``."""
        return (self.host, self.peer_port)

    def command(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "relay",
            "serve",
            "--listen",
            format_host_port(str(self.public_host), self.port),
            "--internal",
            format_host_port(self.host, self.internal_base),
            "--workers",
            str(self.workers),
            "--cluster",
            str(self.cluster),
            "--metrics",
            format_host_port(self.host, self.metrics_port),
            "--pin" if self.pin else "--no-pin",
        ]
        if self.keyring_path:
            args += ["--keyring", self.keyring_path]
        if self.tcp:
            args += ["--listen-tcp", format_host_port(str(self.public_host), self.tcp_port)]
        for network in self.allow_networks:
            args += ["--allow-network", network]
        for tid, (h, p) in sorted(self.transceivers.items()):
            args += ["--transceiver", f"{tid}={format_host_port(h, p)}"]
        for cluster, addresses in sorted(self.routes.items()):
            args += ["--route", f"{cluster}=" + ",".join(format_host_port(*a) for a in addresses)]
        if self.peer_networks:
            args += ["--peer-listen", format_host_port(*self.peer_address)]
            for network in self.peer_networks:
                args += ["--peer-network", network]
        return args + self.extra_args

    def environment(self) -> dict[str, str]:
        """The child's environment: ours without RTCEDGE_*, plus the keyring unless in a file.

        A command line is world-readable (``ps``, /proc/PID/cmdline); the environment is not.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("RTCEDGE_")}
        if not self.keyring_path:
            env["RTCEDGE_KEYRING_JSON"] = self.keyring.to_json()
        return env | self.extra_env

    def start(self, timeout_s: float = 10.0) -> RelayProcess:
        env = self.environment()
        self.proc = _popen(self.command(), env, self.quiet, self.die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relay exited: {_stderr_of(self.proc)}")
            with contextlib.suppress(OSError):
                if self.http("/readyz")[0] == 200:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("relay did not become ready")

    def http(self, path: str) -> tuple[int, str]:
        url = f"http://{format_host_port(self.host, self.metrics_port)}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples whose labels include ``labels``."""
        return metric_value(self.http("/metrics")[1], name, **labels)

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        return children_of(self.proc.pid)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StandInTransceiver:
    """A transceiver stand-in on a real UDP socket, served by a thread.

    Replies go back to the relay address each packet came from, as a real transceiver's do.
    Set ``reading = False`` to stop reading (the socket then becomes a sink that costs no CPU).
    """

    def __init__(self, tid: int, host: str = "127.0.0.1", echo: bool = True, port: int = 0) -> None:
        self.tid = tid
        self.sock = socket.socket(family_of(host), socket.SOCK_DGRAM)
        set_buffers(self.sock, 4 << 20)  # bursts in tests must not be lost in the kernel
        self.sock.bind((host, port))
        self.sock.settimeout(0.05)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self.echo = echo
        self.reading = True
        self.received: list[tuple[str, int, bytes]] = []  # (client ip, client port, payload)
        self.received_flags: list[int] = []  # the header's flags of each, e.g. encap.FLAG_TCP
        self.relay_addresses: set[tuple[str, int]] = set()
        self.relay_of_client: dict[tuple[str, int], tuple[str, int]] = {}  # the latest path
        self.stun_requests = 0
        self.malformed: list[tuple[str, int, bytes]] = []  # STUN that did not parse
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"standin-{tid}")

    def start(self) -> StandInTransceiver:
        self._thread.start()
        return self

    def _serve(self) -> None:
        prefix = f"T{self.tid}:".encode()
        while not self._stop.is_set():
            if not self.reading:
                time.sleep(0.01)
                continue
            try:
                data, relay = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            hdr, off = encap.decode_header(data)
            payload = data[off:]
            self.relay_addresses.add(relay[:2])
            self.relay_of_client[(hdr.client_ip, hdr.client_port)] = relay[:2]
            self.received_flags.append(hdr.flags)
            self.received.append((hdr.client_ip, hdr.client_port, payload))
            if payload[:1] and payload[0] < 4:
                try:
                    msg = stun.parse(payload)
                except stun.StunError:
                    self.malformed.append((hdr.client_ip, hdr.client_port, payload))
                    continue
                if msg.msg_type == stun.BINDING_REQUEST:
                    self.stun_requests += 1
                    reply = stun.binding_success(
                        msg.transaction_id, (hdr.client_ip, hdr.client_port)
                    )
                    self.sock.sendto(data[:off] + reply, relay)
                continue
            if self.echo:
                self.sock.sendto(data[:off] + prefix + payload, relay)

    def send_to_client(
        self, relay: tuple[str, int], client: tuple[str, int], payload: bytes, flags: int = 0
    ) -> None:
        """``flags=encap.FLAG_TCP``: to a client's TCP connection at the relay."""
        self.sock.sendto(encap.encapsulate(payload, client[0], client[1], flags=flags), relay)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()

    def __enter__(self) -> StandInTransceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def udp_drops(port: int) -> int:
    """Datagrams the kernel dropped at a UDP socket bound to ``port`` (/proc/net/udp{,6})."""
    return sum(row.drops for row in udp_socket_rows() if row.port == port)


@dataclass
class TransceiverProcess:
    """``transceiver serve`` in a child process, behind ``relay`` (a started RelayProcess)."""

    relay: RelayProcess
    tid: int = 0
    host: str = "127.0.0.1"
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)  # as RelayProcess.extra_env
    quiet: bool = True
    advertise: tuple[str, int] | None = None  # default: the relay's public address
    advertise_tcp: tuple[str, int] | None = None  # default: the relay's TCP address, if any
    die_with_parent: bool = False  # as RelayProcess.die_with_parent

    def __post_init__(self) -> None:
        self.media_port = free_port(self.host)
        self.http_port = free_port(self.host, socket.SOCK_STREAM)
        self.metrics_port = free_port(self.host, socket.SOCK_STREAM)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def media_address(self) -> tuple[str, int]:
        return (self.host, self.media_port)

    @property
    def url(self) -> str:
        return f"http://{format_host_port(self.host, self.http_port)}"

    def command(self) -> list[str]:
        advertise = format_host_port(*(self.advertise or self.relay.address))
        return [
            sys.executable, "-m", "transceiver", "serve",
            "--id", str(self.tid),
            "--cluster", str(self.relay.cluster),
            "--media", format_host_port(self.host, self.media_port),
            "--advertise", advertise,
            "--http", format_host_port(self.host, self.http_port),
            "--metrics", format_host_port(self.host, self.metrics_port),
            "--log-level", "warning",
            # A relay with ICE over TCP: answers name its TCP address too.
            *(["--advertise-tcp",
               format_host_port(*(self.advertise_tcp or self.relay.tcp_address))]
              if self.relay.tcp else []),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout_s: float = 15.0) -> TransceiverProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RTCEDGE_")}
        env["RTCEDGE_KEYRING_JSON"] = self.relay.keyring.to_json()
        env |= self.extra_env
        self.proc = _popen(self.command(), env, self.quiet, self.die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transceiver exited: {_stderr_of(self.proc)}")
            # Ours, not whatever else answers on the HTTP port: another instance there would
            # answer /readyz while this one fails to bind and exits.
            with contextlib.suppress(OSError):
                if self.http("/readyz")[0] == 200 and self.listens_on(self.http_port):
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("transceiver did not become ready")

    def listens_on(self, port: int) -> bool:
        """Whether this process (not another on the same port) holds a TCP listener on ``port``."""
        assert self.proc is not None
        return bool(socket_inodes(self.proc.pid) & tcp_listener_inodes(port))

    def http(self, path: str, method: str = "GET", port: int | None = None) -> tuple[int, str]:
        url = self.url if port is None else f"http://{format_host_port(self.host, port)}"
        req = urllib.request.Request(f"{url}{path}", method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(self.http("/metrics", port=self.metrics_port)[1], name, **labels)

    def udp_socket_count(self) -> int:
        """UDP sockets this process holds, from /proc (fd inodes matched to /proc/net/udp*)."""
        assert self.proc is not None
        return len(socket_inodes(self.proc.pid) & {row.inode for row in udp_socket_rows()})

    def stop(self, timeout_s: float = 40.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> TransceiverProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sessions_ended(trx: TransceiverProcess) -> dict[str, float]:
    """The transceiver's sessions_ended_total by reason (the recovery benchmark: a trial must
    end no session)."""
    text = trx.http("/metrics", port=trx.metrics_port)[1]
    return {
        line.split('reason="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rtcedge_transceiver_sessions_ended_total{")
    }


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets ``pid`` holds open (/proc/PID/fd)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def tcp_listener_inodes(port: int) -> set[str]:
    """The inodes of TCP sockets listening on ``port`` (/proc/net/tcp{,6}, state 0A)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                    inodes.add(fields[9])
    return inodes


def _popen(
    command: list[str], env: dict[str, str], quiet: bool, die_with_parent: bool
) -> subprocess.Popen[bytes]:
    """A peer's process: stderr captured when ``quiet``, ended with its parent if asked."""
    return subprocess.Popen(
        command,
        env=env,
        stderr=subprocess.PIPE if quiet else None,
        preexec_fn=parent_death_preexec() if die_with_parent else None,
    )


def _stderr_of(proc: subprocess.Popen[bytes]) -> str:
    return proc.stderr.read().decode() if proc.stderr else "(see its log above)"


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of a metric's samples (Prometheus text) whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        sample, _, lab = head.partition("{")
        if sample == name and all(f'{k}="{v}"' in lab for k, v in labels.items()):
            total += float(value)
    return total


class RedisServer:
    """A throwaway ``redis-server`` on loopback (no persistence), stopped by PID."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port(host, socket.SOCK_STREAM)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found (Debian package redis-server)")
        self.proc = subprocess.Popen(
            [binary, "--bind", self.host, "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.2) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NatProxy:
    """A loopback NAT for one client: it sends on through an outside socket it can move.

    The client talks to ``inside`` (advertise it to the client as the relay's address); the
    proxy forwards to ``upstream`` from its outside socket and relays the answers back.
    ``rebind()`` moves the outside socket to a new address and port, as a NAT rebinding does.
    """

    def __init__(self, upstream: tuple[str, int], outside_hosts: tuple[str, ...] = ()) -> None:
        self.upstream = upstream
        self.inside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.inside.bind(("127.0.0.1", 0))
        self._hosts = list(outside_hosts or ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
        self.outside = self._new_outside()
        self.client: tuple[str, int] | None = None
        self.captured: collections.deque[bytes] = collections.deque(maxlen=64)  # client's STUN
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nat-proxy")

    @property
    def address(self) -> tuple[str, int]:
        return self.inside.getsockname()[:2]

    @property
    def outside_address(self) -> tuple[str, int]:
        return self.outside.getsockname()[:2]

    def _new_outside(self) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((self._hosts.pop(0), 0))
        return s

    def start(self) -> NatProxy:
        self._thread.start()
        return self

    def rebind(self) -> tuple[str, int]:
        with self._lock:
            old, self.outside = self.outside, self._new_outside()
        old.close()
        return self.outside_address

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                outside = self.outside
            try:
                ready, _, _ = select.select([self.inside, outside], [], [], 0.05)
            except (OSError, ValueError):
                continue  # the outside socket was just replaced
            for s in ready:
                try:
                    data, src = s.recvfrom(4096)
                except OSError:
                    continue
                if s is self.inside:
                    self.client = src[:2]
                    if data[:1] and data[0] < 4:  # what an eavesdropper on the path would see
                        self.captured.append(data)
                    with contextlib.suppress(OSError):
                        outside.sendto(data, self.upstream)
                elif self.client is not None:
                    self.inside.sendto(data, self.client)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.inside.close()
        self.outside.close()
