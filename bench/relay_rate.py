"""Relay benchmark, rate mode (``rtcedge bench relay --rate 2000,4000,10000,20000``): CPU per
forwarded packet of one relay worker at fixed offered rates, against a C recvmmsg forwarder
(``bench/c_forwarder.c``) at the same rates, and against both at saturation.

Why: at saturation a worker's batches cost about what C costs, but at a realistic load (40 echo
calls: ~4,000 forwards/s) each datagram used to pay a whole wake-up (issue 26). The criteria:
at 4,000 packets/s the relay costs at most 2x its own saturated figure per packet and at most
1.2x the C forwarder's at the same rate; saturated, at most 1.1x C's.

Method. As ``bench/relay_pps.py``: loopback, the relay's one worker and the C forwarder pinned
to one CPU, this process (the generator) and the relay's supervisor to the other, the flows
confirmed through the STUN + hint step, the forwarded datagrams counted at a sink that is never
read, CPU time from /proc/<pid>/schedstat of the forwarding process. The relay runs three times:
with its defaults (``relay``), with ``--coalesce-us 0`` (``relay-nowait``: the worker's loop
without the coalescing wait) and with half the default wait (``relay-500us``). Only the
client -> transceiver direction is offered.

The load at a rate is paced: one datagram every 1/rate s, round robin over the flows, never in
bursts (a generator that falls behind resets its clock rather than catching up). Among them, at
``--ping-rate``, a timestamped datagram of a latency flow whose far end is this process: its
one-way delay through the forwarder under that load (p50, p99). The saturated windows are the
flood of ``bench/relay_pps.py``. Each window is bounded in seconds and packets; the variants are
interleaved within every rate and round, the order rotated.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import click

from bench import c_forwarder
from bench.harness.cli import Echo
from bench.harness.pinning import cpus_of, own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import percentile, spread
from bench.harness.verdict import verdict_lines
from bench.latency import drain, set_recv_timeout
from bench.plain_forwarder import DEFAULT_BUFFER_BYTES
from bench.relay_pps import (
    HOST,
    LATENCY_TID,
    THROUGHPUT_TID,
    BenchConfig,
    Forwarder,
    confirm_flows,
    confirm_latency_flow,
    measure_window,
    silence,
)
from bench.udp_load import Generator, rtp_like_payload, sink_socket, skb_truesize
from common import encap
from relay.config import MAX_COALESCE_US
from testbed.ports import free_port
from testbed.processes import RelayProcess, stop_process
from testbed.standin import StandInTransceiver

S = TypeVar("S")

AT_RATE = 4000  # the criteria's offered rate: 40 echo calls' forwards per second
AT_RATE_VS_SATURATED_MAX = 2.0
AT_RATE_VS_C_MAX = 1.2
SATURATED_VS_C_MAX = 1.1
SPIN_BELOW_NS = 300_000  # closer than this to the next send the generator spins, not sleeps
# The relay variants: name -> extra ``relay serve`` arguments. ``relay``: its defaults
# (--coalesce-us 1000, the longest allowed); ``relay-nowait``: no coalescing wait;
# ``relay-500us``: half the wait, for what a shorter one costs and saves.
RELAY_VARIANTS: dict[str, list[str]] = {
    "relay": [],
    "relay-nowait": ["--coalesce-us", "0"],
    "relay-500us": ["--coalesce-us", str(MAX_COALESCE_US // 2)],
}
C_VARIANT = "c"


@dataclass(frozen=True)
class RateConfig:
    rates: tuple[int, ...] = (2000, 4000, 10000, 20000)
    rounds: int = 2
    window_s: float = 2.0
    warmup_s: float = 0.3
    saturated_window_s: float = 2.0
    flows: int = 64
    payload_bytes: int = 172
    batch_per_send: int = 32  # the saturated flood's
    ping_rate_pps: int = 200
    max_packets_per_window: int = 2_000_000
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False

    def expected_run_s(self) -> float:
        per_round = len(self.rates) * (self.window_s + self.warmup_s + 0.2)
        per_round += self.saturated_window_s + 0.7
        return self.rounds * 3 * per_round + 20.0


@dataclass
class Ping:
    """The latency flow of one variant: this process sends to ``dest`` and reads ``sink``."""

    client: socket.socket
    dest: tuple[str, int]
    sink: socket.socket


@dataclass
class Paced:
    """What one paced window offered, and the pings' delays (ns)."""

    offered: int
    pings_sent: int
    delays_ns: list[int] = field(default_factory=list)


def offer_paced(
    socks: list[socket.socket],
    dest: tuple[str, int],
    payload: bytes,
    rate_pps: int,
    cfg: RateConfig,
    ping: Ping,
    snapshot: Callable[[], S],
) -> tuple[S, S, Paced]:
    """Offer ``rate_pps`` datagrams/s, evenly spaced, round robin over ``socks``, every
    (rate / ping rate)-th one a ping; a warm-up, then a measured window between two snapshots.
    Bounded by the window's seconds and ``max_packets_per_window``."""
    perf = time.perf_counter_ns
    period_ns = 1e9 / rate_pps
    every = max(1, round(rate_pps / cfg.ping_rate_pps))
    sends = [s.sendto for s in socks]
    flows = len(sends)
    out = bytearray(payload)
    rbuf = bytearray(4096)
    ping_send, ping_recv = ping.client.sendto, ping.sink.recv_into
    sinks = [ping.sink]
    drain(ping.sink)
    start = perf()
    mark = start + int(cfg.warmup_s * 1e9)
    end = mark + int(cfg.window_s * 1e9)
    next_ns = float(start)
    before: S | None = None
    result = Paced(0, 0)
    outstanding = 0
    i = 0
    limit = 2 * cfg.max_packets_per_window
    while i < limit:
        now = perf()
        while outstanding:
            try:
                n = ping_recv(rbuf, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            outstanding -= 1
            if before is not None and n >= 8:
                result.delays_ns.append(perf() - int.from_bytes(rbuf[n - 8 : n], "big"))
        if now < next_ns:
            gap = next_ns - now
            if gap > SPIN_BELOW_NS:  # wait, but wake for a ping's reply: its delay is exact
                wait_s = (gap - SPIN_BELOW_NS / 2) / 1e9
                if outstanding:
                    select.select(sinks, (), (), wait_s)
                else:
                    time.sleep(wait_s)
            continue
        with contextlib.suppress(OSError):  # a full buffer: not offered
            if i % every == 0:
                out[-8:] = perf().to_bytes(8, "big")
                ping_send(out, ping.dest)
                outstanding = min(outstanding + 1, 64)
                result.pings_sent += before is not None
            else:
                sends[i % flows](payload, dest)
                result.offered += before is not None
        i += 1
        next_ns += period_ns
        if now - next_ns > 2 * period_ns:  # fell behind: keep the rate, do not burst
            next_ns = float(now)
        if before is None:
            if now >= mark:
                before = snapshot()
        elif now >= end or result.offered >= cfg.max_packets_per_window:
            break
    if before is None:
        before = snapshot()
    time.sleep(0.005)  # the last pings' replies
    with contextlib.suppress(BlockingIOError):
        for _ in range(outstanding):
            n = ping_recv(rbuf, 0, socket.MSG_DONTWAIT)
            if n >= 8:
                result.delays_ns.append(perf() - int.from_bytes(rbuf[n - 8 : n], "big"))
    return before, snapshot(), result


@dataclass
class RateWindow:
    variant: str
    rate_pps: int  # 0: saturated
    round: int
    wall_s: float
    offered_per_s: float
    packets_per_s: float
    cpu_us_per_packet: float
    cpu_fraction: float
    valid: bool
    pings_sent: int = 0
    delays_us: list[float] = field(default_factory=list)
    saturated: bool | None = None


def measure_paced(
    fwd: Forwarder, ping: Ping, socks: list[socket.socket], payload: bytes, rate: int,
    cfg: RateConfig, round_no: int,
) -> RateWindow:  # fmt: skip
    a, b, paced = offer_paced(socks, fwd.listen, payload, rate, cfg, ping, fwd.snapshot)
    wall_s = (b.t_ns - a.t_ns) / 1e9
    queued = round((b.sink.queued_bytes - a.sink.queued_bytes) / fwd.sink_truesize)
    packets = b.sink.drops - a.sink.drops + queued
    if fwd.relay is not None:  # the relay's own worker forwarded the pings too
        packets += len(paced.delays_ns)
    valid = a.pids == b.pids and bool(a.pids)
    cpu_s = sum(y - x for x, y in zip(a.cpu_ns, b.cpu_ns, strict=False)) / 1e9 if valid else 0.0
    return RateWindow(
        variant=fwd.name,
        rate_pps=rate,
        round=round_no,
        wall_s=wall_s,
        offered_per_s=(paced.offered + paced.pings_sent) / wall_s if wall_s > 0 else 0.0,
        packets_per_s=packets / wall_s if wall_s > 0 else 0.0,
        cpu_us_per_packet=cpu_s * 1e6 / packets if packets > 0 else math.inf,
        cpu_fraction=cpu_s / wall_s if wall_s > 0 else 0.0,
        valid=valid,
        pings_sent=paced.pings_sent,
        delays_us=[d / 1e3 for d in paced.delays_ns],
    )


def measure_saturated(gen: Generator, fwd: Forwarder, cfg: RateConfig, round_no: int) -> RateWindow:
    flood = BenchConfig(
        window_s=cfg.saturated_window_s, warmup_s=cfg.warmup_s,
        max_packets_per_window=50_000_000, flows=cfg.flows,
    )  # fmt: skip
    w = measure_window(gen, fwd, flood, round_no)
    return RateWindow(
        variant=fwd.name,
        rate_pps=0,
        round=round_no,
        wall_s=w.wall_s,
        offered_per_s=w.offered_packets / w.wall_s if w.wall_s > 0 else 0.0,
        packets_per_s=w.packets_per_s,
        cpu_us_per_packet=w.cpu_us_per_packet,
        cpu_fraction=w.cpu_fraction_min,
        valid=w.valid,
        saturated=w.counted,
    )


# -- the set-up ------------------------------------------------------------------------------------
@dataclass
class Rig:
    forwarders: list[Forwarder]  # the relay variants, then the C forwarder when built
    pings: dict[str, Ping]
    gen: Generator
    payload: bytes
    gen_cpus: set[int]
    fwd_cpu: int
    supervisors: list[int]
    skipped: dict[str, str]


def start_relays(
    cfg: RateConfig, stack: contextlib.ExitStack, lat_sink: socket.socket
) -> list[tuple[str, RelayProcess, StandInTransceiver]]:
    """One relay per variant, one worker each, pinned by its supervisor to the first CPU this
    process allows; each with a stand-in transceiver (the flows' sink) and this process's
    ``lat_sink`` as the latency flow's transceiver."""
    out = []
    for name, extra in RELAY_VARIANTS.items():
        standin = stack.enter_context(StandInTransceiver(THROUGHPUT_TID))
        relay = RelayProcess(
            {THROUGHPUT_TID: standin.address, LATENCY_TID: lat_sink.getsockname()[:2]},
            workers=1,
            pin=True,
            extra_args=["--idle-ttl", str(max(45, int(2 * cfg.expected_run_s()))), *extra],
        )
        stack.callback(relay.stop)
        relay.start()
        out.append((name, relay, standin))
    return out


def set_up(
    cfg: RateConfig, stack: contextlib.ExitStack, allowed: set[int], notes: list[str], echo: Echo
) -> Rig:
    lat_sink = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    lat_sink.bind((HOST, 0))
    relays = start_relays(cfg, stack, lat_sink)
    worker_pids = [p for _, relay, _ in relays for p in relay.worker_pids()]
    fwd_cpu = min(os.sched_getaffinity(worker_pids[0]))
    gen_cpus = (allowed - cpus_of(worker_pids)) or (allowed - {fwd_cpu}) or allowed
    if fwd_cpu in gen_cpus or cpus_of(worker_pids) != {fwd_cpu}:
        notes.append("the generator shares a CPU with the forwarders: the figures mean little")
    payload = rtp_like_payload(cfg.payload_bytes)
    gen = Generator(cfg.flows, payload, cfg.batch_per_send)
    stack.callback(gen.close)
    truesize = skb_truesize(cfg.payload_bytes + encap.HEADER_LEN_V4)
    forwarders, pings = [], {}
    for name, relay, standin in relays:
        confirm_flows(relay, gen.socks, THROUGHPUT_TID)
        silence(standin)
        client = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        client.bind((HOST, 0))
        set_recv_timeout(client, 0.5)
        set_recv_timeout(lat_sink, 0.5)
        confirm_latency_flow(relay, client, lat_sink)
        pings[name] = Ping(client, relay.address, lat_sink)
        forwarders.append(
            Forwarder(name, relay.address, standin.address, truesize, relay.worker_pids, relay)
        )
    skipped: dict[str, str] = {}
    binary, note = c_forwarder.build()
    echo(note)
    if binary is None:
        skipped[C_VARIANT] = note
    else:
        c_fwd, c_ping = start_c_reference(binary, cfg, stack, lat_sink, fwd_cpu)
        forwarders.append(c_fwd)
        pings[C_VARIANT] = c_ping
    echo(
        f"relay variants {', '.join(RELAY_VARIANTS)}: one worker each on CPU {fwd_cpu}, "
        f"{cfg.flows} flows confirmed; generator on CPUs {sorted(gen_cpus)}"
    )
    return Rig(
        forwarders, pings, gen, payload, gen_cpus, fwd_cpu,
        [relay.proc.pid for _, relay, _ in relays if relay.proc is not None], skipped,
    )  # fmt: skip


def start_c_reference(
    binary: str,
    cfg: RateConfig,
    stack: contextlib.ExitStack,
    lat_sink: socket.socket,
    fwd_cpu: int,
) -> tuple[Forwarder, Ping]:
    """Two C forwarders on the forwarders' CPU: the measured one to a sink, and one on the
    latency path to ``lat_sink``."""
    sink = stack.enter_context(sink_socket()).getsockname()[:2]
    listen, lat_listen = (HOST, free_port(HOST)), (HOST, free_port(HOST))
    bound_s = 2 * cfg.expected_run_s()
    procs: list[subprocess.Popen[bytes]] = []
    for src, dst in ((listen, sink), (lat_listen, lat_sink.getsockname()[:2])):
        proc = c_forwarder.start(binary, src, dst, bound_s, 10**12, cfg.buffer_bytes)
        stack.callback(stop_process, proc)
        pin_process(proc.pid, {fwd_cpu})
        procs.append(proc)
    client = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    client.bind((HOST, 0))
    fwd = Forwarder(
        C_VARIANT, listen, sink, skb_truesize(cfg.payload_bytes), lambda: [procs[0].pid]
    )
    return fwd, Ping(client, lat_listen, lat_sink)


# -- the run ---------------------------------------------------------------------------------------
def run(cfg: RateConfig, echo: Echo = click.echo) -> dict[str, Any]:
    started = utc_now()
    notes: list[str] = []
    windows: list[RateWindow] = []
    with contextlib.ExitStack() as stack:
        allowed = stack.enter_context(own_cpus_restored())
        rig = set_up(cfg, stack, allowed, notes, echo)
        pin_process(os.getpid(), rig.gen_cpus)
        for pid in rig.supervisors:
            pin_process(pid, rig.gen_cpus)
        nfwd = len(rig.forwarders)
        steps = [cfg.warmup_s + cfg.window_s + 0.2] * (len(cfg.rates) * nfwd)
        steps += [cfg.warmup_s + cfg.saturated_window_s + 0.3] * nfwd
        progress = Progress(steps * cfg.rounds, echo, cfg.quick)
        progress.announce(
            f"measuring {cfg.rounds} rounds x {nfwd} forwarders x "
            f"({len(cfg.rates)} rates + saturated)"
        )
        for r in range(cfg.rounds):
            for rate in (*cfg.rates, 0):
                order = rig.forwarders[r % nfwd :] + rig.forwarders[: r % nfwd]
                for fwd in order:
                    if rate:
                        w = measure_paced(
                            fwd, rig.pings[fwd.name], rig.gen.socks, rig.payload, rate, cfg, r
                        )
                    else:
                        w = measure_saturated(rig.gen, fwd, cfg, r)
                    windows.append(w)
                    progress.step(window_line(w, cfg.rounds))
                    time.sleep(0.1 if rate else 0.3)  # the forwarder drains its queue
    result = run_header("relay_rate", started, allowed, cfg)
    result["cpus"] = {"forwarders": rig.fwd_cpu, "generator": sorted(rig.gen_cpus)}
    result["notes"] = notes
    result["variants"] = [f.name for f in rig.forwarders]
    result["skipped"] = rig.skipped
    result["windows"] = [
        {**asdict(w), "delays_us": None, "pings": len(w.delays_us)} for w in windows
    ]
    result["summary"] = summarize(windows, cfg)
    result["criteria"] = criteria(result["summary"])
    notes += shortfalls(result["summary"], cfg)
    return result


def window_line(w: RateWindow, rounds: int) -> str:
    what = f"{w.rate_pps:>6}/s" if w.rate_pps else "saturated"
    lat = ""
    if w.delays_us:
        d = sorted(w.delays_us)
        lat = f"  delay p50 {percentile(d, 0.5):6.0f} p99 {percentile(d, 0.99):6.0f} us"
    sat = "" if w.saturated is None else ("" if w.saturated else "  (not saturated)")
    return (
        f"round {w.round + 1}/{rounds} {w.variant:12} {what:>9} {w.packets_per_s:10,.0f} "
        f"forwarded/s {w.cpu_us_per_packet:7.2f} CPU us/packet  CPU {100 * w.cpu_fraction:5.1f}%"
        f"{lat}{sat}" + ("" if w.valid else "  INVALID (forwarder restarted)")
    )


# -- the result ------------------------------------------------------------------------------------
def summarize(windows: list[RateWindow], cfg: RateConfig) -> dict[str, Any]:
    """Per rate ("saturated" for the flood) and variant: medians over the rounds; the delays
    over all pings of the rounds; the ratios per round."""
    out: dict[str, Any] = {}
    for rate in (*cfg.rates, 0):
        key = str(rate) if rate else "saturated"
        at = [w for w in windows if w.rate_pps == rate and w.valid]
        per_variant: dict[str, Any] = {}
        for name in dict.fromkeys(w.variant for w in at):
            ws = [w for w in at if w.variant == name]
            basis = [w for w in ws if w.saturated is not False] or ws
            delays = sorted(d for w in ws for d in w.delays_us)
            per_variant[name] = {
                "rounds": len(ws),
                # Saturated: the windows that were (else all, and the figures say so).
                "counted_rounds": sum(bool(w.saturated) for w in ws) if rate == 0 else len(ws),
                "offered_per_s": spread([w.offered_per_s for w in basis]),
                "packets_per_s": spread([w.packets_per_s for w in basis]),
                "cpu_us_per_packet": spread([w.cpu_us_per_packet for w in basis]),
                "cpu_fraction": spread([w.cpu_fraction for w in basis]),
                "delay_us": {
                    "pings": len(delays),
                    "sent": sum(w.pings_sent for w in ws),
                    "p50": percentile(delays, 0.5),
                    "p99": percentile(delays, 0.99),
                },
            }
        out[key] = {"variants": per_variant, "ratios": ratios_at(at)}
    sat = out["saturated"]["variants"]
    for entry in out.values():
        for name, v in entry["variants"].items():
            own = sat.get(name, {}).get("cpu_us_per_packet", {}).get("median", math.nan)
            v["vs_own_saturated"] = v["cpu_us_per_packet"]["median"] / own if own else math.nan
    return out


def ratios_at(windows: list[RateWindow]) -> dict[str, Any]:
    """Per round, each relay variant's CPU per packet over C's (and the coalescing's over the
    no-wait loop's), medians over the rounds."""
    by_round: dict[int, dict[str, RateWindow]] = {}
    for w in windows:
        by_round.setdefault(w.round, {})[w.variant] = w
    pairs = [(name, C_VARIANT) for name in RELAY_VARIANTS] + [("relay", "relay-nowait")]
    out = {}
    for num, den in pairs:
        values = [
            ws[num].cpu_us_per_packet / ws[den].cpu_us_per_packet
            for ws in by_round.values()
            if num in ws and den in ws and ws[den].cpu_us_per_packet > 0
        ]
        if values:
            out[f"{num}/{den}"] = spread(values)
    return out


def shortfalls(summary: dict[str, Any], cfg: RateConfig) -> list[str]:
    """What makes a figure mean less than it says: a generator behind its rate (its CPU is
    shared), saturated windows that were not."""
    out = []
    for rate in cfg.rates:
        for name, v in summary[str(rate)]["variants"].items():
            offered = v["offered_per_s"]["median"]
            if offered < 0.9 * rate:
                out.append(f"at {rate}/s the generator offered {name} only {offered:,.0f}/s")
    for name, v in summary["saturated"]["variants"].items():
        if not v["counted_rounds"]:
            out.append(
                f"{name} was not saturated in any round (CPU "
                f"{100 * v['cpu_fraction']['median']:.0f}%): its 'saturated' figure is not one"
            )
    return out


def saturated(summary: dict[str, Any], *names: str) -> bool:
    """Were these variants saturated in at least one round?"""
    variants = summary["saturated"]["variants"]
    return all(variants.get(name, {}).get("counted_rounds") for name in names)


def criteria(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's three; one that leans on a saturated figure that was not passes never."""
    unsaturated = " (not judged: no saturated window)"
    out = []
    at = summary.get(str(AT_RATE))
    if at is not None and "relay" in at["variants"]:
        v = at["variants"]["relay"]["vs_own_saturated"]
        out.append(
            {
                "name": f"relay at {AT_RATE}/s <= {AT_RATE_VS_SATURATED_MAX}x its saturated cost",
                "value": v,
                "pass": bool(v <= AT_RATE_VS_SATURATED_MAX and saturated(summary, "relay")),
                "detail": f"{v:.2f}x" + ("" if saturated(summary, "relay") else unsaturated),
            }
        )
        r = at["ratios"].get(f"relay/{C_VARIANT}")
        if r:
            out.append(
                {
                    "name": f"relay / C at {AT_RATE}/s <= {AT_RATE_VS_C_MAX}",
                    "value": r["median"],
                    "pass": bool(r["median"] <= AT_RATE_VS_C_MAX),
                    "detail": f"median {r['median']:.2f} over {r['n']} rounds",
                }
            )
    pair = ("relay", C_VARIANT)
    r = summary["saturated"]["ratios"].get("/".join(pair))
    if r:
        out.append(
            {
                "name": f"relay / C saturated <= {SATURATED_VS_C_MAX}",
                "value": r["median"],
                "pass": bool(r["median"] <= SATURATED_VS_C_MAX and saturated(summary, *pair)),
                "detail": f"median {r['median']:.2f} over {r['n']} rounds"
                + ("" if saturated(summary, *pair) else unsaturated),
            }
        )
    return out


# -- the report ------------------------------------------------------------------------------------
def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"relay_rate: {cfg['rounds']} rounds, {cfg['window_s']} s per rate, {cfg['flows']} flows, "
        f"{cfg['payload_bytes']}-byte datagrams, client -> transceiver; forwarders on CPU "
        f"{result['cpus']['forwarders']}, generator on CPUs {result['cpus']['generator']}"
    )
    for name, why in result["skipped"].items():
        echo(f"{name}: skipped: {why}")
    echo(
        f"{'rate/s':>9} {'variant':12} {'forwarded/s':>11} {'CPU us/pkt':>10} "
        f"{'x own sat.':>10} {'CPU %':>6} {'delay p50':>9} {'p99 us':>7}"
    )
    for key, entry in result["summary"].items():
        for name, v in entry["variants"].items():
            d = v["delay_us"]
            p50 = "-" if not d["pings"] else f"{d['p50']:.0f}"
            p99 = "-" if not d["pings"] else f"{d['p99']:.0f}"
            echo(
                f"{key:>9} {name:12} {v['packets_per_s']['median']:11,.0f} "
                f"{v['cpu_us_per_packet']['median']:10.2f} {v['vs_own_saturated']:10.2f} "
                f"{100 * v['cpu_fraction']['median']:6.1f} {p50:>9} {p99:>7}"
            )
        ratios = ", ".join(
            f"{k} {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"
            for k, r in entry["ratios"].items()
        )
        if ratios:
            echo(f"{'':>9} CPU per packet {ratios}")
    echo("")
    for line in verdict_lines(result):
        echo(line)


def parse_rates(text: str) -> tuple[int, ...]:
    """'2000,4000,10000' -> the offered rates (packets/s), each 100..200000."""
    try:
        rates = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected rates like 2000,4000,10000, got {text!r}") from None
    if not rates or any(not 100 <= r <= 200_000 for r in rates):
        raise click.BadParameter(f"each rate must be within 100..200000 packets/s, got {text!r}")
    return rates
