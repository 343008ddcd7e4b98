"""Relay benchmark: packets/s, CPU per packet and added latency of one relay worker, measured
against reference forwarders in the same run.

``python -m bench.relay_pps`` (or ``rtcedge bench relay``) checks the relay performance issue's two
acceptance criteria:

- one relay worker costs at most 0.7x the CPU per packet of the plain Python forwarder
  (`bench/plain_forwarder.py`) and of nginx's stream UDP proxy when present, full relay logic on;
- the relay's added latency p50 at a moderate fixed rate is within 20 us of the plain forwarder's.

Method. All traffic is on 127.0.0.1. The relay runs as ``relay serve`` with one worker pinned to
the first allowed CPU; every reference forwarder is pinned to that same CPU, and this process (the
generator) and the relay's supervisor to the other one. Client flows (one socket each) first
complete the STUN + hint step through the relay, so the relay forwards them as confirmed flows.
The generator then offers more than any forwarder can take: per socket one sendmmsg of a batch of
RTP-like datagrams, round robin over the sockets. Forwarders send to a sink that is never read
and has a minimal receive buffer, so it costs no CPU and counts every datagram in /proc/net/udp
(drops + queued). Each variant gets a window per round, the variants interleaved, the order
rotated every round; a window counts only if the forwarder was saturated (CPU time >= 90 % of the
wall time). CPU time comes from /proc/<pid>/schedstat of the forwarding process (relay: its
workers), packets from the sink; the relay's own packet counter is recorded as a cross-check.

Latency: one flow, sequential pings at a fixed rate; this process sends a sequence-numbered
datagram through a forwarder to a socket it reads itself and records the one-way delay with
perf_counter_ns (same host, same clock); "added" latency is a forwarder's p50 minus the direct
path's p50 (no forwarder). The variants alternate in short segments.

The generator's send loop is the hot path of this file; the rest is written for reading.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import json
import math
import os
import platform
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from bench import nginx_ref
from bench.harness.procfs import cpu_ns
from bench.peers import RelayProcess, StandInTransceiver, free_port, hint_request
from bench.plain_forwarder import DEFAULT_BUFFER_BYTES
from common import encap, stun
from relay.mmsg import SendBatch, sockaddr_bytes

HOST = "127.0.0.1"
THROUGHPUT_TID = 3  # the stand-in transceiver that sinks the throughput flows
LATENCY_TID = 4  # the socket this process reads for latency pings through the relay
CPU_RATIO_MAX = 0.7
ADDED_LATENCY_MAX_US = 20.0
SATURATED_CPU_FRACTION = 0.9
# The relay caps pending flows per source /24 (default 64) and every loopback client shares one,
# so flows are set up in waves that stay below that cap.
SETUP_WAVE = 32
LATENCY_SEGMENT_S = 0.1  # short, so that every path sees the same background load
RESULTS_DIR = Path(__file__).resolve().parent / "results"
SO_RCVBUF_MIN = 1  # the kernel rounds it up to its minimum: a handful of datagrams


@dataclass(frozen=True)
class BenchConfig:
    rounds: int = 5
    window_s: float = 3.0
    warmup_s: float = 0.5
    flows: int = 64
    workers: int = 1
    payload_bytes: int = 172  # RTP header (12 B) + 20 ms of G.711 (160 B)
    batch_per_send: int = 32
    latency_rate_pps: int = 2000
    latency_s: float = 2.0
    max_packets_per_window: int = 50_000_000
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    out_dir: str = str(RESULTS_DIR)
    nginx: str | None = None

    def expected_run_s(self) -> float:
        windows = self.rounds * 3 * (self.window_s + self.warmup_s + 1.0)
        return windows + 4 * (self.latency_s + 1.0) + 30.0


# -- /proc -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UdpPortStats:
    queued_bytes: int  # rx_queue: the truesize of every queued skb
    drops: int


def udp_key(address: tuple[str, int]) -> str:
    """An IPv4 address as /proc/net/udp spells it: the address word in host byte order, in hex."""
    word = int.from_bytes(socket.inet_aton(address[0]), sys.byteorder)
    return f"{word:08X}:{address[1]:04X}"


def udp_sockets() -> dict[str, UdpPortStats]:
    """Receive queue and drops of the IPv4 UDP sockets of this network namespace, summed per
    local address (the relay's workers share theirs)."""
    table: dict[str, UdpPortStats] = {}
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        cols = line.split()
        queued = int(cols[4].split(":")[1], 16)
        old = table.get(cols[1], UdpPortStats(0, 0))
        table[cols[1]] = UdpPortStats(old.queued_bytes + queued, old.drops + int(cols[-1]))
    return table


def skb_truesize(datagram_bytes: int) -> int:
    """Receive-queue bytes one loopback datagram of this size occupies, to turn rx_queue into a
    datagram count."""
    count = 4
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx,
    ):
        rx.bind((HOST, 0))
        for _ in range(count):
            tx.sendto(bytes(datagram_bytes), rx.getsockname())
        stats = udp_sockets().get(udp_key(rx.getsockname()), UdpPortStats(0, 0))
        return max(1, stats.queued_bytes // count)


CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def user_system_s(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process (/proc/<pid>/stat, clock-tick resolution): where
    a forwarder's time goes, Python or the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS_PER_S, int(fields[12]) / CLOCK_TICKS_PER_S


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (sched_setaffinity acts on one thread at a time)."""
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(tid), cpus)


def wait_bound(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if udp_key((HOST, port)) in udp_sockets():
            return
        time.sleep(0.02)
    raise RuntimeError(f"nothing bound UDP port {port}")


# -- the generator -------------------------------------------------------------------------------
def rtp_like_payload(size_bytes: int) -> bytes:
    """An RTP-looking datagram (version 2, PCMU): first byte 0x80 as RFC 7983 classifies RTP."""
    header = struct.pack("!BBHII", 0x80, 0, 1, 160, 0x1234ABCD)
    return (header + os.urandom(max(0, size_bytes - len(header))))[:size_bytes]


class Generator:
    """Client sockets, one per flow, that offer a forwarder more datagrams than it can take."""

    def __init__(self, flows: int, payload: bytes, batch: int) -> None:
        self.socks: list[socket.socket] = []
        for _ in range(flows):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((HOST, 0))
            s.setblocking(False)
            self.socks.append(s)
        self.batch = batch
        self._payload = ctypes.create_string_buffer(payload, len(payload))
        self._payload_len = len(payload)
        self._batches: dict[tuple[str, int], SendBatch] = {}

    def _batch_to(self, dest: tuple[str, int]) -> SendBatch:
        sb = self._batches.get(dest)
        if sb is None:
            sb = SendBatch(socket.AF_INET, self.batch, iovs=1)
            raw = sockaddr_bytes(socket.AF_INET, *dest)
            for k in range(self.batch):
                sb.names[k * sb.name_stride : k * sb.name_stride + len(raw)] = raw
                sb.iov[k * 2] = ctypes.addressof(self._payload)
                sb.iov[k * 2 + 1] = self._payload_len
            self._batches[dest] = sb
        return sb

    def offer(
        self,
        dest: tuple[str, int],
        warmup_s: float,
        window_s: float,
        max_packets: int,
        snapshot: Callable[[], Snapshot],
    ) -> tuple[Snapshot, Snapshot, int]:
        """Flood ``dest`` for a warm-up, then for a measured window between two snapshots.

        Hot path: per socket one sendmmsg of ``batch`` datagrams, round robin. Bounded by time
        and by ``max_packets`` in the window (and as many in the warm-up).
        """
        send = self._batch_to(dest).send
        batch = self.batch
        fds = [s.fileno() for s in self.socks]
        per_sweep = batch * len(fds)
        max_sweeps = 2 * (max_packets // per_sweep + 1)
        mark_at = time.monotonic() + warmup_s
        end_at = mark_at + window_s
        before: Snapshot | None = None
        offered = offered_at_mark = 0
        for _ in range(max_sweeps):
            failed = 0
            for fd in fds:
                failed += send(fd, batch)
            offered += per_sweep - failed
            now = time.monotonic()
            if before is None:
                if now >= mark_at:
                    before = snapshot()
                    offered_at_mark = offered
            elif now >= end_at or offered - offered_at_mark >= max_packets:
                break
        if before is None:  # the packet bound ended the warm-up
            before = snapshot()
            offered_at_mark = offered
        return before, snapshot(), offered - offered_at_mark

    def close(self) -> None:
        for s in self.socks:
            s.close()


# -- forwarders under test -------------------------------------------------------------------------
@dataclass
class Snapshot:
    t_ns: int
    pids: tuple[int, ...]
    cpu_ns: tuple[int, ...]
    user_s: float
    system_s: float
    sink: UdpPortStats
    listen_drops: int
    relay_packets: float | None = None
    relay_drops: float | None = None


@dataclass
class Forwarder:
    """One variant: where to send, which processes forward, which port sinks the output."""

    name: str
    listen: tuple[str, int]
    sink: tuple[str, int]
    sink_truesize: int
    pids: Callable[[], list[int]]
    relay: RelayProcess | None = None

    def snapshot(self) -> Snapshot:
        t_ns = time.perf_counter_ns()
        pids = tuple(self.pids())
        cpu = tuple(cpu_ns(p) for p in pids)
        user_system = [user_system_s(p) for p in pids]
        sockets = udp_sockets()
        snap = Snapshot(
            t_ns,
            pids,
            cpu,
            sum(u for u, _ in user_system),
            sum(s for _, s in user_system),
            sockets.get(udp_key(self.sink), UdpPortStats(0, 0)),
            sockets.get(udp_key(self.listen), UdpPortStats(0, 0)).drops,
        )
        if self.relay is not None:
            snap.relay_packets = self.relay.metric(
                "rtcedge_relay_packets_total", direction="client_to_transceiver"
            )
            snap.relay_drops = self.relay.metric("rtcedge_relay_dropped_packets_total")
        return snap


@dataclass
class Window:
    """One variant's measurement in one round."""

    variant: str
    round: int
    wall_s: float
    packets: int
    offered_packets: int
    cpu_s: float
    cpu_fraction_min: float  # of the least busy forwarding process
    listen_drops: int
    packets_per_s: float
    cpu_us_per_packet: float
    user_us_per_packet: float  # clock-tick resolution: a profiling hint, not a criterion
    system_us_per_packet: float
    saturated: bool
    valid: bool  # same forwarding processes at both ends of the window
    relay_counter_packets: float | None = None
    relay_drops: float | None = None

    @property
    def counted(self) -> bool:
        return self.saturated and self.valid and self.packets > 0


def measure_window(gen: Generator, fwd: Forwarder, cfg: BenchConfig, round_no: int) -> Window:
    a, b, offered = gen.offer(
        fwd.listen, cfg.warmup_s, cfg.window_s, cfg.max_packets_per_window, fwd.snapshot
    )
    wall_s = (b.t_ns - a.t_ns) / 1e9
    queued = round((b.sink.queued_bytes - a.sink.queued_bytes) / fwd.sink_truesize)
    packets = b.sink.drops - a.sink.drops + queued
    valid = a.pids == b.pids and bool(a.pids)
    cpu = [y - x for x, y in zip(a.cpu_ns, b.cpu_ns, strict=False)] if valid else [0]
    cpu_s = sum(cpu) / 1e9
    frac = min(cpu) / 1e9 / wall_s if wall_s > 0 else 0.0
    return Window(
        variant=fwd.name,
        round=round_no,
        wall_s=wall_s,
        packets=packets,
        offered_packets=offered,
        cpu_s=cpu_s,
        cpu_fraction_min=frac,
        listen_drops=b.listen_drops - a.listen_drops,
        packets_per_s=packets / wall_s if wall_s > 0 else 0.0,
        cpu_us_per_packet=cpu_s * 1e6 / packets if packets > 0 else math.inf,
        user_us_per_packet=(b.user_s - a.user_s) * 1e6 / packets if packets > 0 else math.inf,
        system_us_per_packet=(b.system_s - a.system_s) * 1e6 / packets if packets > 0 else math.inf,
        # Saturated: busy all the time and offered more than it took.
        saturated=frac >= SATURATED_CPU_FRACTION and b.listen_drops > a.listen_drops,
        valid=valid,
        relay_counter_packets=(
            b.relay_packets - a.relay_packets if a.relay_packets is not None else None
        ),
        relay_drops=(b.relay_drops - a.relay_drops if a.relay_drops is not None else None),
    )


# -- flow set-up ---------------------------------------------------------------------------------
def confirm_flows(
    relay: RelayProcess, socks: list[socket.socket], tid: int, timeout_s: float = 30.0
) -> None:
    """Complete the STUN + hint step for every client socket: send a Binding request carrying a
    signed hint and wait for the Binding success the transceiver returns through the relay (the
    relay confirms the flow on the way back)."""
    deadline = time.monotonic() + timeout_s
    todo = list(socks)
    for _attempt in range(3):
        missed: list[socket.socket] = []
        for i in range(0, len(todo), SETUP_WAVE):
            wave = todo[i : i + SETUP_WAVE]
            waiting = {s.fileno(): s for s in wave}
            poller = select.poll()
            for s in wave:
                packet, _ufrag = hint_request(relay.keyring, relay.cluster, tid)
                s.sendto(packet, relay.address)
                poller.register(s, select.POLLIN)
            wave_deadline = min(deadline, time.monotonic() + 1.0)
            while waiting and (left_s := wave_deadline - time.monotonic()) > 0:
                for fd, _ in poller.poll(left_s * 1000):
                    with contextlib.suppress(BlockingIOError):
                        data = waiting[fd].recv(2048)
                        if data[:2] == b"\x01\x01":  # Binding success
                            poller.unregister(fd)
                            del waiting[fd]
            missed += waiting.values()
        todo = missed
        if not todo:
            return
    raise RuntimeError(f"{len(todo)} of {len(socks)} flows were not confirmed by the relay")


def confirm_latency_flow(relay: RelayProcess, client: socket.socket, sink: socket.socket) -> None:
    """The STUN + hint step for the latency flow, with this process as its transceiver."""
    for _attempt in range(3):
        packet, _ufrag = hint_request(relay.keyring, relay.cluster, LATENCY_TID)
        client.sendto(packet, relay.address)
        try:
            data, relay_internal = sink.recvfrom(2048)
            header, offset = encap.decode_header(data)
            msg = stun.parse(data[offset:])
            reply = stun.binding_success(msg.transaction_id, (header.client_ip, header.client_port))
            sink.sendto(data[:offset] + reply, relay_internal)
            if client.recv(2048)[:2] == b"\x01\x01":
                return
        except (BlockingIOError, TimeoutError, encap.EncapError, stun.StunError):
            continue
    raise RuntimeError("the latency flow was not confirmed by the relay")


# -- latency -------------------------------------------------------------------------------------
def set_recv_timeout(sock: socket.socket, timeout_s: float) -> None:
    """SO_RCVTIMEO: the kernel bounds a blocking receive (a Python timeout would poll first)."""
    sec = int(timeout_s)
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", sec, int((timeout_s - sec) * 1e6))
    )


def drain(sock: socket.socket, max_packets: int = 100_000) -> None:
    for _ in range(max_packets):
        try:
            sock.recv(65536, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return


def ping_series(
    client: socket.socket,
    dest: tuple[str, int],
    sink: socket.socket,
    rate_pps: int,
    seconds: float,
    payload: bytes,
) -> tuple[list[int], int]:
    """Sequential pings at a fixed rate; returns (one-way delays in ns, lost pings)."""
    count = max(1, int(rate_pps * seconds))
    period_ns = int(1e9 / rate_pps)
    out = bytearray(payload)
    rbuf = bytearray(65536)
    delays_ns: list[int] = []
    lost = 0
    drain(sink)
    hard_deadline_ns = time.perf_counter_ns() + int((2 * seconds + 1) * 1e9)
    next_ns = time.perf_counter_ns()
    first_seq = next_ns  # unique per series: a straggler of an earlier series never matches
    for seq in range(first_seq, first_seq + count):
        struct.pack_into("!Q", out, len(out) - 8, seq)
        sent_ns = time.perf_counter_ns()
        client.sendto(out, dest)
        for _stale in range(16):  # a late reply to an earlier ping may be queued first
            try:
                n = sink.recv_into(rbuf)
            except BlockingIOError:  # SO_RCVTIMEO expired
                lost += 1
                break
            got_ns = time.perf_counter_ns()
            if n >= 8 and struct.unpack_from("!Q", rbuf, n - 8)[0] == seq:
                delays_ns.append(got_ns - sent_ns)
                break
        next_ns += period_ns
        now_ns = time.perf_counter_ns()
        if now_ns > hard_deadline_ns:
            break
        if next_ns > now_ns:
            time.sleep((next_ns - now_ns) / 1e9)
        else:
            next_ns = now_ns  # fell behind: keep the rate, do not burst
    return delays_ns, lost


def percentile(sorted_values: list[int], q: float) -> float:
    """Nearest-rank percentile."""
    if not sorted_values:
        return math.nan
    return float(sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)])


@dataclass
class LatencyResult:
    variant: str
    samples: int
    lost: int
    p50_us: float
    p90_us: float
    p99_us: float
    added_p50_us: float | None = None


def measure_latency(
    paths: dict[str, tuple[str, int]],
    client: socket.socket,
    sink: socket.socket,
    cfg: BenchConfig,
    payload: bytes,
) -> dict[str, LatencyResult]:
    """Each path in short segments, alternating in rotating order, ``cfg.latency_s`` in total
    per path."""
    segments = max(1, math.ceil(cfg.latency_s / LATENCY_SEGMENT_S))
    delays: dict[str, list[int]] = {name: [] for name in paths}
    lost = dict.fromkeys(paths, 0)
    names = list(paths)
    for seg in range(segments):
        for name in names[seg % len(names) :] + names[: seg % len(names)]:
            dest = paths[name]
            d, n_lost = ping_series(
                client, dest, sink, cfg.latency_rate_pps, cfg.latency_s / segments, payload
            )
            delays[name] += d
            lost[name] += n_lost
    results = {}
    for name, values in delays.items():
        values.sort()
        results[name] = LatencyResult(
            name,
            len(values),
            lost[name],
            percentile(values, 0.5) / 1e3,
            percentile(values, 0.9) / 1e3,
            percentile(values, 0.99) / 1e3,
        )
    direct = results["direct"].p50_us
    for name, res in results.items():
        if name != "direct":
            res.added_p50_us = res.p50_us - direct
    return results


# -- processes -----------------------------------------------------------------------------------
def sink_socket() -> socket.socket:
    """A bound socket that is never read: every datagram sent to it is counted as a drop."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SO_RCVBUF_MIN)
    s.bind((HOST, 0))
    return s


def start_plain(
    listen: tuple[str, int], to: tuple[str, int], cfg: BenchConfig
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "bench.plain_forwarder"]
    args += ["--listen", f"{listen[0]}:{listen[1]}", "--to", f"{to[0]}:{to[1]}"]
    args += ["--max-seconds", str(2 * cfg.expected_run_s())]
    args += ["--buffer-bytes", str(cfg.buffer_bytes)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_bound(listen[1])
    except RuntimeError:
        stop_process(proc)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"plain forwarder did not start: {err.strip()[-500:]}") from None
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- summary and report --------------------------------------------------------------------------
def spread(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def summarize(windows: list[Window]) -> dict[str, Any]:
    """Medians over the saturated windows (over all of them, flagged, if none was saturated)."""
    counted = [w for w in windows if w.counted]
    basis = counted or [w for w in windows if w.packets > 0]
    return {
        "rounds": len(windows),
        "saturated_rounds": len(counted),
        "summary_over": "saturated rounds" if counted else "all rounds (none saturated)",
        "packets_per_s": spread([w.packets_per_s for w in basis]),
        "cpu_us_per_packet": spread([w.cpu_us_per_packet for w in basis]),
        "user_us_per_packet": spread([w.user_us_per_packet for w in basis]),
        "system_us_per_packet": spread([w.system_us_per_packet for w in basis]),
        "cpu_fraction": spread([w.cpu_fraction_min for w in basis]),
        "offered_packets_per_s": spread([w.offered_packets / w.wall_s for w in basis]),
    }


def round_ratios(windows: list[Window], num: str, den: str) -> dict[str, Any]:
    """Per round CPU per packet of ``num`` / ``den``, over rounds where both were saturated."""
    by_round: dict[int, dict[str, Window]] = {}
    for w in windows:
        by_round.setdefault(w.round, {})[w.variant] = w
    per_round = []
    for r, ws in sorted(by_round.items()):
        if num in ws and den in ws and ws[num].packets > 0 and ws[den].packets > 0:
            per_round.append(
                {
                    "round": r,
                    "ratio": ws[num].cpu_us_per_packet / ws[den].cpu_us_per_packet,
                    "counted": ws[num].counted and ws[den].counted,
                }
            )
    counted = [x["ratio"] for x in per_round if x["counted"]]
    basis = counted or [x["ratio"] for x in per_round]
    return {"per_round": per_round, "over_saturated_rounds": bool(counted), **spread(basis)}


def fmt_spread(s: dict[str, Any], pattern: str) -> str:
    if not s["n"]:
        return "-"
    return f"{pattern.format(s['median'])} ({pattern.format(s['min'])}-{pattern.format(s['max'])})"


def print_report(result: dict[str, Any], echo: Callable[[str], None]) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"relay_pps: {cfg['rounds']} rounds x {cfg['window_s']} s, {cfg['flows']} flows, "
        f"{cfg['payload_bytes']}-byte payloads, {cfg['workers']} relay worker(s); "
        f"forwarders on CPU {result['cpus']['forwarders']}, "
        f"generator on CPU {result['cpus']['generator']}"
    )
    echo(
        f"{'variant':8} {'packets/s median (min-max)':32} {'CPU us/packet median (min-max)':32} "
        f"{'user+sys us':>12} {'CPU %':>6} {'saturated':>10}"
    )
    for name, v in result["variants"].items():
        if "skipped" in v:
            echo(f"{name:8} skipped: {v['skipped']}")
            continue
        s = v["summary"]
        echo(
            f"{name:8} {fmt_spread(s['packets_per_s'], '{:,.0f}'):32} "
            f"{fmt_spread(s['cpu_us_per_packet'], '{:.3f}'):32} "
            f"{s['user_us_per_packet']['median']:5.2f}+{s['system_us_per_packet']['median']:<6.2f} "
            f"{100 * s['cpu_fraction']['median']:6.1f} "
            f"{s['saturated_rounds']:>5}/{s['rounds']}"
        )
    for key, ratio in result["ratios"].items():
        note = "" if ratio["over_saturated_rounds"] else "  (not all windows saturated)"
        echo(f"CPU per packet {key}: {fmt_spread(ratio, '{:.3f}')}{note}")
    lat = result["latency"]
    echo("")
    echo(
        f"latency at {lat['rate_pps']} packets/s, one flow, {lat['seconds']} s per path "
        "(one-way, us):"
    )
    echo(
        f"{'path':8} {'p50':>8} {'p90':>8} {'p99':>8} {'added p50':>10} {'samples':>8} {'lost':>5}"
    )
    for name, r in lat["paths"].items():
        added = "-" if r["added_p50_us"] is None else f"{r['added_p50_us']:.1f}"
        echo(
            f"{name:8} {r['p50_us']:8.1f} {r['p90_us']:8.1f} {r['p99_us']:8.1f} {added:>10} "
            f"{r['samples']:8} {r['lost']:5}"
        )
    echo("")
    for c in result["criteria"]:
        echo(f"{'PASS' if c['pass'] else 'FAIL'} {c['name']}: {c['detail']}")
    for note in result["notes"]:
        echo(f"note: {note}")


def criteria(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, ratio in result["ratios"].items():
        value = ratio["median"]
        ok = ratio["n"] > 0 and value <= CPU_RATIO_MAX and ratio["over_saturated_rounds"]
        out.append(
            {
                "name": f"cpu per packet {key} <= {CPU_RATIO_MAX}",
                "value": value,
                "pass": bool(ok),
                "detail": f"median {value:.3f} over {ratio['n']} rounds"
                + ("" if ratio["over_saturated_rounds"] else " (forwarders not saturated)"),
            }
        )
    paths = result["latency"]["paths"]
    if "relay" in paths and "plain" in paths:
        diff = paths["relay"]["added_p50_us"] - paths["plain"]["added_p50_us"]
        out.append(
            {
                "name": f"added latency p50 relay - plain <= {ADDED_LATENCY_MAX_US:.0f} us",
                "value": diff,
                "pass": bool(diff <= ADDED_LATENCY_MAX_US),
                "detail": f"{paths['relay']['added_p50_us']:.1f} - "
                f"{paths['plain']['added_p50_us']:.1f} = {diff:.1f} us",
            }
        )
    return out


def write_json(result: dict[str, Any], out_dir: str) -> Path:
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"relay_pps-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True, default=_json_default) + "\n")
    return path


def _json_default(obj: object) -> object:
    return None if isinstance(obj, float) and not math.isfinite(obj) else str(obj)


# -- the run -------------------------------------------------------------------------------------
def run(cfg: BenchConfig, echo: Callable[[str], None] = click.echo) -> dict[str, Any]:
    """Set everything up, measure, tear everything down (by PID) whatever happens."""
    with contextlib.ExitStack() as stack:
        return _run(cfg, echo, stack)


def _run(cfg: BenchConfig, echo: Callable[[str], None], stack: contextlib.ExitStack) -> dict:
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    notes: list[str] = []
    allowed = set(os.sched_getaffinity(0))
    stack.callback(pin_process, os.getpid(), allowed)
    payload = rtp_like_payload(cfg.payload_bytes)

    # The relay first, while this process may still run anywhere: the supervisor pins worker i
    # to the i-th CPU this process allows.
    standin = stack.enter_context(StandInTransceiver(THROUGHPUT_TID))
    lat_sink = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    lat_sink.bind((HOST, 0))
    set_recv_timeout(lat_sink, 0.05)
    relay = RelayProcess(
        {THROUGHPUT_TID: standin.address, LATENCY_TID: lat_sink.getsockname()[:2]},
        workers=cfg.workers,
        pin=True,
        # Nothing answers the throughput flows after set-up (the sink is silent), so nothing
        # refreshes them: keep them for the whole run. The hot path does not depend on the TTL.
        extra_args=["--idle-ttl", str(max(45, int(2 * cfg.expected_run_s())))],
    )
    stack.callback(relay.stop)
    relay.start()
    worker_pids = relay.worker_pids()
    if len(worker_pids) != cfg.workers:
        raise RuntimeError(f"relay has {len(worker_pids)} workers, expected {cfg.workers}")
    relay_cpus: set[int] = set()
    for pid in worker_pids:
        relay_cpus |= os.sched_getaffinity(pid)
    fwd_cpu = min(os.sched_getaffinity(worker_pids[0]))
    gen_cpus = (allowed - relay_cpus) or (allowed - {fwd_cpu}) or allowed
    if gen_cpus & relay_cpus:
        notes.append(
            f"the generator shares CPUs {sorted(gen_cpus & relay_cpus)} with relay workers: "
            "neither the CPU nor the latency comparison is meaningful on this machine"
        )

    # Flows: the throughput clients and the latency client complete the STUN + hint step.
    gen = Generator(cfg.flows, payload, cfg.batch_per_send)
    stack.callback(gen.close)
    confirm_flows(relay, gen.socks, THROUGHPUT_TID)
    standin.reading = False
    time.sleep(0.1)  # let the stand-in's thread leave its last receive
    standin.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SO_RCVBUF_MIN)
    lat_client = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    lat_client.bind((HOST, 0))
    set_recv_timeout(lat_client, 0.5)
    set_recv_timeout(lat_sink, 0.5)
    confirm_latency_flow(relay, lat_client, lat_sink)
    set_recv_timeout(lat_sink, 0.05)
    echo(
        f"relay: {cfg.workers} worker(s) {worker_pids} on CPUs {sorted(relay_cpus)}, "
        f"{cfg.flows} flows confirmed"
    )

    # Reference forwarders, on the relay worker's CPU.
    plain_sink = stack.enter_context(sink_socket())
    plain_listen = (HOST, free_port(HOST))
    plain = start_plain(plain_listen, plain_sink.getsockname()[:2], cfg)
    stack.callback(stop_process, plain)
    plain_lat_listen = (HOST, free_port(HOST))
    plain_lat = start_plain(plain_lat_listen, lat_sink.getsockname()[:2], cfg)
    stack.callback(stop_process, plain_lat)
    for proc in (plain, plain_lat):
        pin_process(proc.pid, {fwd_cpu})

    truesize_plain = skb_truesize(cfg.payload_bytes)
    truesize_relay = skb_truesize(cfg.payload_bytes + encap.HEADER_LEN_V4)
    forwarders = [
        Forwarder(
            "relay", relay.address, standin.address, truesize_relay, relay.worker_pids, relay
        ),
        Forwarder(
            "plain", plain_listen, plain_sink.getsockname()[:2], truesize_plain, lambda: [plain.pid]
        ),
    ]
    latency_paths = {
        "direct": lat_sink.getsockname()[:2],
        "plain": plain_lat_listen,
        "relay": relay.address,
    }

    nginx_bin, nginx_note = nginx_ref.find_nginx(cfg.nginx)
    echo(nginx_note)
    nginx_skipped: str | None = None if nginx_bin else nginx_note
    if nginx_bin is not None:
        nginx_sink = stack.enter_context(sink_socket())
        nginx_listen = (HOST, free_port(HOST))
        nginx_lat_listen = (HOST, free_port(HOST))
        proxy = nginx_ref.NginxProxy(
            nginx_bin,
            [
                (nginx_listen, nginx_sink.getsockname()[:2]),
                (nginx_lat_listen, lat_sink.getsockname()[:2]),
            ],
            cfg.buffer_bytes,
        )
        stack.callback(proxy.stop)
        problem = proxy.check()
        if problem:
            nginx_skipped = f"nginx -t rejected the configuration: {problem}"
            echo(nginx_skipped)
        else:
            proxy.start()
            pin_process(proxy.proc.pid, gen_cpus)  # type: ignore[union-attr]
            for pid in proxy.worker_pids():
                pin_process(pid, {fwd_cpu})
            forwarders.append(
                Forwarder(
                    "nginx",
                    nginx_listen,
                    nginx_sink.getsockname()[:2],
                    truesize_plain,
                    proxy.worker_pids,
                )
            )
            latency_paths["nginx"] = nginx_lat_listen

    # From here on this process is the generator: keep it, and the relay's supervisor, off the
    # forwarders' CPU.
    pin_process(os.getpid(), gen_cpus)
    pin_process(relay.proc.pid, gen_cpus)  # type: ignore[union-attr]

    windows: list[Window] = []
    for r in range(cfg.rounds):
        order = forwarders[r % len(forwarders) :] + forwarders[: r % len(forwarders)]
        for fwd in order:
            w = measure_window(gen, fwd, cfg, r)
            windows.append(w)
            echo(
                f"round {r + 1}/{cfg.rounds} {fwd.name:6} {w.packets_per_s:12,.0f} packets/s "
                f"{w.cpu_us_per_packet:7.3f} CPU us/packet  CPU {100 * w.cpu_fraction_min:5.1f}% "
                f"listen drops {w.listen_drops:>9}"
                + ("" if w.valid else "  INVALID (forwarder restarted)")
            )
            time.sleep(0.1)  # the forwarder drains its queue before the next window
    for w in windows:
        if w.relay_drops:
            notes.append(f"relay dropped {w.relay_drops:.0f} packets in round {w.round + 1}")

    time.sleep(0.3)
    lat = measure_latency(latency_paths, lat_client, lat_sink, cfg, payload)

    result: dict[str, Any] = {
        "benchmark": "relay_pps",
        "started_utc": started,
        "host": {
            "cpus_allowed": sorted(allowed),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "config": asdict(cfg),
        "cpus": {"forwarders": fwd_cpu, "generator": sorted(gen_cpus)},
        "counting": "sink socket drops + queued datagrams from /proc/net/udp, for every variant",
        "saturation_rule": (
            f"a window counts when its forwarder's CPU time >= {SATURATED_CPU_FRACTION:.0%} of "
            "the wall time and its receive socket dropped datagrams (offered > taken)"
        ),
        "variants": {},
        "ratios": {},
        "latency": {
            "rate_pps": cfg.latency_rate_pps,
            "seconds": cfg.latency_s,
            "paths": {name: asdict(res) for name, res in lat.items()},
        },
        "notes": notes,
    }
    for fwd in forwarders:
        ws = [w for w in windows if w.variant == fwd.name]
        result["variants"][fwd.name] = {
            "summary": summarize(ws),
            "windows": [{**asdict(w), "counted": w.counted} for w in ws],
        }
    if nginx_skipped:
        result["variants"]["nginx"] = {"skipped": nginx_skipped}
    for ref in [f.name for f in forwarders if f.name != "relay"]:
        result["ratios"][f"relay/{ref}"] = round_ratios(windows, "relay", ref)
    result["criteria"] = criteria(result)
    return result


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


EXAMPLES = """
\b
Examples:
  python -m bench.relay_pps                 # 5 interleaved rounds of 3 s, then latency
  python -m bench.relay_pps --quick         # smoke test: 2 rounds of 1 s
  python -m bench.relay_pps --nginx /usr/sbin/nginx --rounds 7
\b
Prints a table and PASS/FAIL for the issue's two criteria, writes the JSON result, and exits 0
whatever the figures are.
"""


@click.command("relay", epilog=EXAMPLES)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Interleaved rounds; every variant gets one window per round.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="Length of one measured window.",
)
@click.option(
    "--flows",
    type=click.IntRange(min=64),
    default=None,
    help="Client flows (one socket each) [default: 64, or 1000 with --workers > 1].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Relay workers.",
)
@click.option(
    "--payload",
    type=click.IntRange(min=16, max=1400),
    default=172,
    show_default=True,
    help="Datagram size in bytes (RTP-like, first byte 0x80).",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=256),
    default=32,
    show_default=True,
    help="Datagrams per sendmmsg of the generator.",
)
@click.option(
    "--latency-rate",
    type=click.IntRange(min=1, max=100_000),
    default=2000,
    show_default=True,
    help="Pings per second in the latency test.",
)
@click.option(
    "--latency-seconds",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds of pings per path [default: 2, 0.5 with --quick].",
)
@click.option(
    "--max-packets",
    type=click.IntRange(min=1000),
    default=50_000_000,
    show_default=True,
    help="Packet bound of one window.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=str(RESULTS_DIR),
    show_default=True,
    help="Folder for the JSON result.",
)
@click.option("--nginx", default=None, help="nginx binary [default: nginx on PATH, if any].")
@click.option("--quick", is_flag=True, help="2 rounds of 1 s: a smoke test, not a measurement.")
def relay_bench(
    rounds: int,
    seconds: float,
    flows: int | None,
    workers: int,
    payload: int,
    batch: int,
    latency_rate: int,
    latency_seconds: float | None,
    max_packets: int,
    out_dir: str,
    nginx: str | None,
    quick: bool,
) -> None:
    """Packets/s, CPU per packet and added latency of the relay vs reference forwarders."""
    if flows is None:
        flows = 1000 if workers > 1 else 64
    elif workers > 1 and flows < 1000:
        raise click.UsageError("--flows must be at least 1000 with --workers > 1")
    if quick:
        rounds, seconds = 2, 1.0
    cfg = BenchConfig(
        rounds=rounds,
        window_s=seconds,
        warmup_s=0.2 if quick else 0.5,
        flows=flows,
        workers=workers,
        payload_bytes=payload,
        batch_per_send=batch,
        latency_rate_pps=latency_rate,
        latency_s=latency_seconds or (0.5 if quick else 2.0),
        max_packets_per_window=max_packets,
        out_dir=out_dir,
        nginx=nginx,
    )
    # SIGTERM unwinds like Ctrl-C, so that every process started here is stopped by PID.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    result = run(cfg)
    print_report(result, click.echo)
    click.echo(f"results: {write_json(result, cfg.out_dir)}")


if __name__ == "__main__":
    relay_bench()
