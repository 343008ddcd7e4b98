"""The services as child processes on loopback: what the benchmarks, ``rtcedge up`` and tests run.

- ``RelayProcess`` runs ``relay serve`` and finds its workers; ``TransceiverProcess`` runs
  ``transceiver serve`` behind one; ``RedisServer`` a throwaway ``redis-server``.
- ``started_in_order`` starts several and stops those that started, last first.
- ``stop_process`` and ``drain_stderr``: any child, stopped by its PID, its captured stderr kept
  flowing.

Each is a real process that a test can kill, restart or read through /proc (testbed/procfs.py).
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from common.config import format_host_port
from common.hint import Keyring
from common.lifetime import parent_death_preexec
from relay.addresspolicy import LOOPBACK_NETWORKS
from testbed.ports import free_port, free_port_range
from testbed.procfs import children_of, socket_inodes, tcp_listener_inodes, udp_socket_rows


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


# Transceiver options that turn its load gate off (transceiver.headroom): for a run whose
# point is not admission, on a machine whose load is not the run's own (a benchmark saturating
# on purpose, a test sharing a busy CI core with others).
NO_LOAD_GATE = ["--admit-max-cpu", "0", "--admit-max-loop-lag", "0"]


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
    # (certificate, key) files: --http serves https (--https-cert, --https-key), and this side
    # trusts that certificate alone.
    https: tuple[str, str] | None = None

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
        scheme = "https" if self.https else "http"
        return f"{scheme}://{format_host_port(self.host, self.http_port)}"

    def tls_context(self) -> ssl.SSLContext | None:
        """What trusts --http's certificate and nothing else; its names unchecked: ``host``
        may be a wildcard, which no certificate names."""
        if self.https is None:
            return None
        context = ssl.create_default_context(cafile=self.https[0])
        context.check_hostname = False
        return context

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
            *(["--https-cert", self.https[0], "--https-key", self.https[1]] if self.https else []),
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
        """A request to --http (over https with ``https``), or to ``port`` over plain http."""
        url = self.url if port is None else f"http://{format_host_port(self.host, port)}"
        req = urllib.request.Request(f"{url}{path}", method=method)
        context = self.tls_context() if port is None else None
        try:
            with urllib.request.urlopen(req, timeout=5, context=context) as resp:
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


def _popen(
    command: list[str], env: dict[str, str], quiet: bool, die_with_parent: bool
) -> subprocess.Popen[bytes]:
    """A service's process: stderr captured when ``quiet``, ended with its parent if asked."""
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


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 5.0) -> int:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``; its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def drain_stderr(proc: subprocess.Popen[bytes], tail: collections.deque[str]) -> None:
    """Keep reading a child's captured stderr so that a full pipe never blocks it; the last
    lines stay in ``tail`` for a report."""

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.decode(errors="replace").rstrip())

    threading.Thread(target=pump, daemon=True, name=f"stderr-{proc.pid}").start()
