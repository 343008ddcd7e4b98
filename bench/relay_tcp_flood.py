"""ICE-TCP flood benchmark (issue 21): a UDP call's round-trip time through a relay worker while
one ICE-TCP connection on the same worker streams frames at full speed, against the same call
without the attack, in the same run.

``rtcedge bench tcp-flood`` (or ``python3 -m bench.relay_tcp_flood``). One ``relay serve
--listen-tcp`` with one worker; a stand-in transceiver that echoes the victim's datagrams, one
that answers checks and sinks media (the confirmed attacker's), and a socket nobody reads (the
transceiver of a call already ended: the unconfirmed attacker's). Three variants, one window
each per round, the order rotated every round:

- ``quiet``: the victim alone (the reference);
- ``unconfirmed``: 4-byte frames (``00 02 00 01``) from a connection admitted with a hint its
  transceiver no longer answers;
- ``confirmed``: 12-byte RTP-like frames (the smallest that passes the floor) from a connection
  its transceiver answered.

The victim: sequential pings (send, wait for the echo, up to ``--ping-timeout``) at ``--ping-rate``
from this process; the attacker is a separate process (spawned, so that it shares neither this
process's interpreter lock nor its CPU time), on the CPUs other than the worker's. Per window:
the victim's RTT p50/p99/max and loss, the worker's CPU share (/proc schedstat), and the frames
the relay forwarded to transceivers and dropped over TCP by its own counters (an attacker's
connection is read at its rate after it left, until it times out: a window may count frames
of the previous one). Criterion (issue 21): under either attack the victim's p99 (the median
over rounds; the worst is printed too) < 20 ms and loss < 1 %.

Bounded: each window in seconds and the attack in bytes; every process started here is stopped
by PID.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import select
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from bench.harness.pinning import pin_process
from bench.harness.stats import percentile
from bench.latency import set_recv_timeout
from common import stun
from testbed.processes import RelayProcess
from testbed.procfs import process_cpu_ns
from testbed.standin import StandInTransceiver, hint_request

VICTIM, ANSWERS, SILENT = 3, 4, 2
VARIANTS = ("quiet", "unconfirmed", "confirmed")
CHUNKS = {
    "unconfirmed": b"\x00\x02\x00\x01" * 16384,
    "confirmed": (b"\x00\x0c\x80" + bytes(11)) * 4096,
}
UP = "client_to_transceiver"
P99_MAX_MS = 20.0
LOSS_MAX = 0.01


@dataclass(frozen=True)
class FloodConfig:
    rounds: int = 3
    window_s: float = 3.0
    ping_rate_per_s: int = 200
    ping_timeout_s: float = 1.0
    max_attack_bytes: int = 256 << 20


@dataclass
class Window:
    variant: str
    round_no: int
    pings: int
    lost: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    worker_cpu_pct: float
    worker_waited_ms: float  # runnable but not running: the machine's other load
    tcp_forwarded: float
    tcp_dropped: float


def _attack(
    address: tuple[str, int],
    first_frame: bytes,
    answered: bool,
    chunk: bytes,
    seconds: float,
    max_bytes: int,
    cpus: list[int],
    ready: Any,  # multiprocessing Events
    go: Any,
) -> None:
    """The attacker (a spawned process): admitted by ``first_frame`` (and confirmed when the
    transceiver ``answered``), then ``chunk`` as fast as the connection takes it."""
    os.sched_setaffinity(0, cpus)
    with socket.create_connection(address, timeout=5) as s:
        s.sendall(len(first_frame).to_bytes(2, "big") + first_frame)
        if answered:
            s.recv(4096)  # the Binding success: the connection is confirmed
        ready.set()
        go.wait(30)
        s.setblocking(False)
        sent, deadline = 0, time.monotonic() + seconds
        while sent < max_bytes and time.monotonic() < deadline:
            if not select.select([], [s], [], 0.05)[1]:
                continue
            try:
                sent += s.send(chunk)
            except BlockingIOError:
                continue
            except OSError:
                return


def _pings(
    call: socket.socket, relay: tuple[str, int], cfg: FloodConfig
) -> tuple[list[float], int]:
    """Sequential pings for one window: the RTTs (ms) of those answered, and how many were
    sent. A late echo of an earlier ping is skipped by its sequence number."""
    rtts: list[float] = []
    every_s = 1.0 / cfg.ping_rate_per_s
    count = int(cfg.window_s * cfg.ping_rate_per_s)
    next_at = time.monotonic()
    for seq in range(count):
        sent_ns = time.perf_counter_ns()
        call.sendto(b"\x80" + seq.to_bytes(4, "big") + bytes(160), relay)
        wait_until = time.monotonic() + cfg.ping_timeout_s
        while time.monotonic() < wait_until:
            try:
                data = call.recv(4096)
            except (BlockingIOError, TimeoutError):
                continue
            if data[3:4] == b"\x80" and int.from_bytes(data[4:8], "big") == seq:
                rtts.append((time.perf_counter_ns() - sent_ns) / 1e6)
                break
        next_at += every_s
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return rtts, count


def _tcp_counter(relay: RelayProcess, name: str, **labels: str) -> float:
    return relay.metric(name, transport="tcp", **labels)


def measure_window(
    relay: RelayProcess,
    call: socket.socket,
    variant: str,
    round_no: int,
    cfg: FloodConfig,
    others: list[int],
    answers: StandInTransceiver,
) -> Window:
    worker = relay.worker_pids()[0]
    attacker = None
    if variant != "quiet":
        spawn = multiprocessing.get_context("spawn")
        ready, go = spawn.Event(), spawn.Event()
        tid = SILENT if variant == "unconfirmed" else ANSWERS
        first = hint_request(relay.keyring, relay.cluster, tid)[0]
        attacker = spawn.Process(
            target=_attack,
            args=(
                relay.tcp_address,
                first,
                variant == "confirmed",
                CHUNKS[variant],
                cfg.window_s + 0.5,
                cfg.max_attack_bytes,
                others,
                ready,
                go,
            ),
        )
        answers.reading = True  # to answer the confirmed attacker's check
        attacker.start()
        if not ready.wait(30):
            raise RuntimeError("the attacker was not admitted")
        answers.reading = False  # then a sink: its flood costs this process nothing
        go.set()
        time.sleep(0.2)  # the attack is under way before the first ping
    fwd0 = _tcp_counter(relay, "rtcedge_relay_packets_total", direction=UP)
    drop0 = _tcp_counter(relay, "rtcedge_relay_dropped_packets_total")
    (cpu0, wait0), wall0 = process_cpu_ns(worker), time.monotonic()
    rtts, count = _pings(call, relay.address, cfg)
    cpu1, wait1 = process_cpu_ns(worker)
    cpu_pct = 100 * (cpu1 - cpu0) / 1e9 / (time.monotonic() - wall0)
    fwd = _tcp_counter(relay, "rtcedge_relay_packets_total", direction=UP) - fwd0
    dropped = _tcp_counter(relay, "rtcedge_relay_dropped_packets_total") - drop0
    if attacker is not None:
        attacker.join(timeout=cfg.window_s + 10)
        if attacker.is_alive():
            attacker.terminate()  # ours, by its handle (PID)
            attacker.join(5)
    rtts.sort()
    with contextlib.suppress(BlockingIOError, TimeoutError):
        while call.recv(4096):  # late echoes of this window
            pass
    return Window(
        variant,
        round_no,
        count,
        count - len(rtts),
        percentile(rtts, 0.5),
        percentile(rtts, 0.99),
        rtts[-1] if rtts else float("nan"),
        cpu_pct,
        (wait1 - wait0) / 1e6,
        fwd,
        dropped,
    )


def run(cfg: FloodConfig, echo=click.echo) -> list[Window]:
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # never read: a call that ended
    sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sink.bind(("127.0.0.1", 0))
    windows: list[Window] = []
    with (
        StandInTransceiver(VICTIM) as victim,
        StandInTransceiver(ANSWERS, echo=False) as answers,
        RelayProcess(
            {VICTIM: victim.address, ANSWERS: answers.address, SILENT: sink.getsockname()},
            workers=1,
            tcp=True,
        ) as relay,
    ):
        worker_cpus = os.sched_getaffinity(relay.worker_pids()[0])
        others = sorted(set(os.sched_getaffinity(0)) - worker_cpus) or sorted(worker_cpus)
        pin_process(os.getpid(), set(others))
        call = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        call.bind(("127.0.0.1", 0))
        set_recv_timeout(call, 0.05)
        call.sendto(hint_request(relay.keyring, relay.cluster, VICTIM)[0], relay.address)
        reply = call.recv(4096)
        assert stun.parse(reply).msg_type == stun.BINDING_SUCCESS
        echo(
            f"relay: 1 worker [{relay.worker_pids()[0]}] on CPUs {sorted(worker_cpus)}; "
            f"victim pings and attacker on CPUs {others}"
        )
        for r in range(cfg.rounds):
            order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
            for variant in order:
                w = measure_window(relay, call, variant, r + 1, cfg, others, answers)
                windows.append(w)
                echo(
                    f"round {r + 1} {variant:<11} p50 {w.p50_ms:7.2f} ms  p99 {w.p99_ms:7.2f} ms"
                    f"  max {w.max_ms:7.2f} ms  lost {w.lost}/{w.pings}  worker CPU "
                    f"{w.worker_cpu_pct:5.1f}% (waited {w.worker_waited_ms:.0f} ms)  tcp "
                    f"forwarded {w.tcp_forwarded:.0f} dropped {w.tcp_dropped:.0f}"
                )
        call.close()
    sink.close()
    return windows


def report(windows: list[Window], echo=click.echo) -> bool:
    echo("")
    echo("variant      p50 ms  p99 ms  max ms   loss   worker CPU %  (median over rounds)")
    ok = True
    for variant in VARIANTS:
        ws = [w for w in windows if w.variant == variant]
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        p99 = med([w.p99_ms for w in ws])
        loss = sum(w.lost for w in ws) / max(1, sum(w.pings for w in ws))
        echo(
            f"{variant:<11} {med([w.p50_ms for w in ws]):7.2f} {p99:7.2f} "
            f"{max(w.max_ms for w in ws):7.2f} {100 * loss:5.2f}%  "
            f"{med([w.worker_cpu_pct for w in ws]):10.1f}"
        )
        if variant != "quiet":
            # The median over rounds: one window of a shared machine's other load (see the
            # worker's wait) must not decide; the worst is printed beside it.
            passed = p99 < P99_MAX_MS and loss < LOSS_MAX
            ok &= passed
            echo(
                f"  {'PASS' if passed else 'FAIL'} {variant}: p99 {p99:.2f} ms (median over "
                f"rounds; worst {max(w.p99_ms for w in ws):.2f}) < {P99_MAX_MS:g}, loss "
                f"{100 * loss:.2f}% < {100 * LOSS_MAX:g}%"
            )
    return ok


@click.command("tcp-flood")
@click.option(
    "--rounds",
    type=click.IntRange(1, 20),
    default=3,
    show_default=True,
    help="Rounds; every variant (quiet, unconfirmed, confirmed) gets one window per round.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.5, 30),
    default=3.0,
    show_default=True,
    help="Length of one window: the attack and the victim's pings.",
)
@click.option(
    "--ping-rate",
    type=click.IntRange(10, 2000),
    default=200,
    show_default=True,
    help="The victim's sequential pings per second.",
)
@click.option("--json-out", default=None, help="Write the windows as JSON here.")
def tcp_flood_bench(rounds: int, seconds: float, ping_rate: int, json_out: str | None) -> None:
    """A UDP call's RTT beside an ICE-TCP connection streaming tiny frames, vs without."""
    cfg = FloodConfig(rounds=rounds, window_s=seconds, ping_rate_per_s=ping_rate)
    windows = run(cfg)
    ok = report(windows)
    if json_out:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump([asdict(w) for w in windows], f, indent=1)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    tcp_flood_bench()
