"""One-way latency through UDP forwarders, measured by sequential pings from this process.

This process sends a sequence-numbered datagram through a forwarder to a socket it reads itself
and records the delay with perf_counter_ns (same host, same clock). The paths alternate in short
segments, so that every one sees the same background load; "added" latency is a path's p50
minus the direct path's (no forwarder). Used by the relay benchmark (``bench/relay_pps.py``).
"""

from __future__ import annotations

import math
import socket
import struct
import time
from dataclasses import dataclass, field

from bench.harness.stats import percentile

LATENCY_SEGMENT_S = 0.1  # short, so that every path sees the same background load


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


@dataclass
class LatencyResult:
    variant: str
    samples: int
    lost: int
    p50_us: float
    p90_us: float
    p99_us: float
    added_p50_us: float | None = None
    # The distribution (the plot's CDF): the delay at every whole percentile, 0 (fastest) .. 100.
    percentiles_us: list[float] = field(default_factory=list)


def measure_latency(
    paths: dict[str, tuple[str, int]],
    client: socket.socket,
    sink: socket.socket,
    rate_pps: int,
    seconds: float,
    payload: bytes,
) -> dict[str, LatencyResult]:
    """Each path in short segments, alternating in rotating order, ``seconds`` in total per
    path; ``paths`` must hold a "direct" one, the base of every added latency."""
    segments = max(1, math.ceil(seconds / LATENCY_SEGMENT_S))
    delays: dict[str, list[int]] = {name: [] for name in paths}
    lost = dict.fromkeys(paths, 0)
    names = list(paths)
    for seg in range(segments):
        for name in names[seg % len(names) :] + names[: seg % len(names)]:
            d, n_lost = ping_series(
                client, paths[name], sink, rate_pps, seconds / segments, payload
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
            percentiles_us=[round(percentile(values, q / 100) / 1e3, 1) for q in range(101)]
            if values
            else [],
        )
    direct = results["direct"].p50_us
    for name, res in results.items():
        if name != "direct":
            res.added_p50_us = res.p50_us - direct
    return results
