"""ICE-over-TCP benchmark: what a frame over TCP costs a relay worker against a UDP datagram at
the same offered load, and how the workers should accept connections, each measured against its
reference in the same run.

``rtcedge bench tcp`` runs two sections (issue 13):

1. **Frames.** One ``relay serve --listen-tcp`` with one worker pinned to the first allowed CPU;
   this process (the generator) and the relay's supervisor on the others; a stand-in transceiver
   that answers the set-up and then only sinks. ``--flows`` UDP flows and as many TCP
   connections complete the STUN + hint step through the relay. Then windows alternate, UDP and
   TCP, the order rotated every round; in both the generator offers the same ``--rate`` frames
   per second (``bench/tcp_load.py``: one datagram per ``send``, one RFC 4571 frame per
   ``send``), below what the worker takes on either transport, so that both windows do the same
   work and the ratio of their CPU per frame is a real ratio (a worker flooded by one transport
   and not the other pays a different share of wake-ups per frame). Per window: the worker's CPU
   time (every thread's /proc schedstat) from the window's start until it is idle again, over
   the frames it forwarded by its own counter for that transport. Criterion: TCP/UDP, the
   median of the per-round ratios, <= ``TCP_OVER_UDP_MAX`` (why this bound: docs/benchmarks.md).
2. **Accept** (``--no-accept`` leaves it out): server CPU per connection of two workers on
   per-worker ``SO_REUSEPORT`` listeners (what the relay does) against a dedicated acceptor
   handing descriptors to two workers (``bench/tcp_accept.py``), interleaved rounds.
   Criterion: the acceptor costs at least as much (acceptor/reuseport >= 1, the median of the
   per-round ratios), i.e. the relay's choice still holds.

Bounded: every window in seconds and frames, every wait by a deadline; every process started
here is stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from bench import tcp_accept
from bench.harness.bounds import Deadline
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import spread
from bench.harness.verdict import verdict_lines
from bench.plots.relay_tcp import relay_tcp_figure
from bench.relay_pps import fmt_spread, place_generator, silence
from bench.tcp_load import close_all, open_tcp_flows, open_udp_flows, paced_send
from bench.udp_load import rtp_like_payload
from relay.framing import frame
from testbed.processes import RelayProcess
from testbed.procfs import process_cpu_ns
from testbed.standin import StandInTransceiver

TID = 3
TRANSPORTS = ("udp", "tcp")
TCP_OVER_UDP_MAX = 2.5  # CPU per frame, TCP / UDP at the same load (docs/benchmarks.md: why)
ACCEPTOR_OVER_REUSEPORT_MIN = 1.0
PACED_FRACTION = 0.95  # a window counts when the generator offered at least this of its rate
IDLE_CPU_FRACTION = 0.01  # the worker is idle (settled) below this share of a core


@dataclass(frozen=True)
class BenchConfig:
    rounds: int = 6
    window_s: float = 3.0
    rate_fps: int = 40_000  # frames per second offered in every window, both transports
    flows: int = 50  # UDP flows, and as many TCP connections
    payload_bytes: int = 172  # RTP header (12 B) + 20 ms of G.711 (160 B)
    max_frames_per_window: int = 2_000_000
    accept: bool = True
    accept_rounds: int = 6
    accept_connections: int = 2000  # per round and design
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False  # a smoke test: the criteria are not judged

    def window_step_s(self) -> float:
        return self.window_s + 0.5  # the window, then the worker settles

    def accept_step_s(self) -> float:
        return 0.2 + self.accept_connections * 200e-6


@dataclass
class Window:
    """One transport's window in one round."""

    transport: str
    round: int
    offered_frames: int
    refused_frames: int  # due, but the socket's buffer was full
    wall_s: float
    forwarded_frames: int  # the worker's own counter, after it settled
    dropped_frames: int  # the relay's drop counter for this transport
    cpu_us: float  # the worker's, from the window's start until it was idle again
    cpu_us_per_frame: float
    worker_busy: float  # the worker's CPU time during the window over its wall time
    paced: bool  # the generator offered at least PACED_FRACTION of the rate

    @property
    def counted(self) -> bool:
        return self.paced and self.forwarded_frames > 0


# -- frames: the measurement -----------------------------------------------------------------------
def worker_cpu_ns(pid: int) -> int:
    return process_cpu_ns(pid)[0]


def settle(worker: int, timeout_s: float = 10.0) -> None:
    """Wait until the worker has forwarded what was queued: its CPU time stops growing."""
    deadline = Deadline.after(timeout_s)
    last = worker_cpu_ns(worker)
    while not deadline.passed():
        time.sleep(0.2)
        now = worker_cpu_ns(worker)
        if now - last < IDLE_CPU_FRACTION * 0.2e9:
            return
        last = now


def relay_counter(relay: RelayProcess, name: str, transport: str) -> float:
    if name == "packets":
        return relay.metric(
            "rtcedge_relay_packets_total", transport=transport, direction="client_to_transceiver"
        )
    return relay.metric("rtcedge_relay_dropped_packets_total", transport=transport)


def measure_window(
    relay: RelayProcess, worker: int, transport: str, load: tuple[list, bytes], cfg: BenchConfig,
    round_no: int,
) -> Window:  # fmt: skip
    socks, data = load
    settle(worker)  # nothing of the last window is still queued
    frames_before = relay_counter(relay, "packets", transport)
    drops_before = relay_counter(relay, "drops", transport)
    cpu_before = worker_cpu_ns(worker)
    offered = paced_send(socks, data, cfg.rate_fps, cfg.window_s, cfg.max_frames_per_window)
    busy_ns = worker_cpu_ns(worker) - cpu_before
    settle(worker)  # what was queued is forwarded, counted, and its CPU time with it
    cpu_us = (worker_cpu_ns(worker) - cpu_before) / 1000
    frames = round(relay_counter(relay, "packets", transport) - frames_before)
    wanted = min(cfg.rate_fps * cfg.window_s, cfg.max_frames_per_window)
    return Window(
        transport=transport,
        round=round_no,
        offered_frames=offered.frames,
        refused_frames=offered.refused,
        wall_s=offered.wall_s,
        forwarded_frames=frames,
        dropped_frames=round(relay_counter(relay, "drops", transport) - drops_before),
        cpu_us=cpu_us,
        cpu_us_per_frame=cpu_us / frames if frames else float("inf"),
        worker_busy=busy_ns / 1e9 / offered.wall_s if offered.wall_s > 0 else 0.0,
        paced=offered.frames >= PACED_FRACTION * wanted,
    )


def unpaced_note(w: Window, quick: bool) -> str:
    """A window the generator could not pace is not counted; a quick run on a busy machine has
    them often, and is not judged anyway."""
    if w.paced:
        return ""
    if quick:
        return "  not counted: the generator fell behind its rate (a busy machine? not judged)"
    return "  NOT PACED (the generator fell behind): not counted"


def measure_frames(
    relay: RelayProcess, worker: int, loads: dict[str, tuple[list, bytes]], cfg: BenchConfig,
    progress: Progress,
) -> list[Window]:  # fmt: skip
    """One window per transport per round, the order swapped every round."""
    windows = []
    for r in range(cfg.rounds):
        for transport in TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]:
            w = measure_window(relay, worker, transport, loads[transport], cfg, r)
            windows.append(w)
            progress.step(
                f"round {r + 1}/{cfg.rounds} {transport} {w.forwarded_frames:>9,} frames "
                f"{w.cpu_us_per_frame:7.3f} CPU us/frame  worker busy {100 * w.worker_busy:5.1f}%"
                + unpaced_note(w, cfg.quick)
            )
    return windows


def frames_section(
    cfg: BenchConfig, allowed: set[int], notes: list[str], progress: Progress, echo: Echo
) -> dict[str, Any]:
    """The relay and its flows of both transports, the windows, torn down by PID."""
    with contextlib.ExitStack() as stack:
        standin = stack.enter_context(StandInTransceiver(TID, echo=False))
        relay = RelayProcess(
            {TID: standin.address},
            workers=1,
            tcp=True,
            # Nothing answers the flows after set-up, so nothing refreshes them: keep them (and
            # the connections) for the whole run; and all of them come from one source prefix.
            extra_args=[
                "--idle-ttl", str(max(45, int(4 * expected_run_s(cfg)))),
                "--tcp-max-per-prefix", str(max(64, cfg.flows)),
            ],
        )  # fmt: skip
        stack.callback(relay.stop)
        relay.start()
        (worker,) = relay.worker_pids()
        worker_cpu, gen_cpus = place_generator(relay, allowed, notes)
        pin_process(os.getpid(), gen_cpus)
        pin_process(relay.proc.pid, gen_cpus)  # type: ignore[union-attr]
        udp = open_udp_flows(relay, cfg.flows, TID)
        stack.callback(close_all, udp)
        tcp = open_tcp_flows(relay, cfg.flows, TID)
        stack.callback(close_all, tcp)
        silence(standin)  # a sink from now on, at no CPU cost
        echo(
            f"relay: 1 worker {worker} on CPU {worker_cpu}, {cfg.flows} UDP flows and "
            f"{cfg.flows} TCP connections confirmed; generator on CPUs {sorted(gen_cpus)}"
        )
        payload = rtp_like_payload(cfg.payload_bytes)
        loads = {"udp": (udp, payload), "tcp": (tcp, frame(payload))}
        windows = measure_frames(relay, worker, loads, cfg, progress)
    return {
        "cpus": {"worker": worker_cpu, "generator": sorted(gen_cpus)},
        "transports": {
            t: {
                "summary": summarize([w for w in windows if w.transport == t]),
                "windows": [
                    {**asdict(w), "counted": w.counted} for w in windows if w.transport == t
                ],
            }
            for t in TRANSPORTS
        },
        "tcp_over_udp": round_ratios(windows),
        "tcp_over_udp_max": TCP_OVER_UDP_MAX,
    }


def summarize(windows: list[Window]) -> dict[str, Any]:
    counted = [w for w in windows if w.counted]
    return {
        "rounds": len(windows),
        "counted_rounds": len(counted),
        "frames_forwarded": sum(w.forwarded_frames for w in windows),
        "cpu_us_per_frame": spread([w.cpu_us_per_frame for w in counted]),
        "worker_busy": spread([w.worker_busy for w in counted]),
        "frames_per_s": spread([w.offered_frames / w.wall_s for w in counted]),
    }


def round_ratios(windows: list[Window]) -> dict[str, Any]:
    """Per round TCP / UDP CPU per frame, over the rounds where both windows counted."""
    by_round: dict[int, dict[str, Window]] = {}
    for w in windows:
        by_round.setdefault(w.round, {})[w.transport] = w
    per_round = [
        {"round": r, "ratio": ws["tcp"].cpu_us_per_frame / ws["udp"].cpu_us_per_frame}
        for r, ws in sorted(by_round.items())
        if len(ws) == 2 and ws["tcp"].counted and ws["udp"].counted
    ]
    return {"per_round": per_round, **spread([x["ratio"] for x in per_round])}


# -- accept ----------------------------------------------------------------------------------------
def accept_section(cfg: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Server CPU per connection of both designs, interleaved rounds (``bench/tcp_accept.py``)."""
    samples: dict[str, list[float]] = {d: [] for d in tcp_accept.DESIGNS}
    with tcp_accept.servers() as running:
        for r in range(cfg.accept_rounds):
            for design in tcp_accept.DESIGNS[:: -1 if r % 2 else 1]:
                port, pids = running[design]
                us = tcp_accept.server_cpu_us_per_connection(port, pids, cfg.accept_connections)
                samples[design].append(us)
                progress.step(
                    f"round {r + 1}/{cfg.accept_rounds} {design:9} {cfg.accept_connections} "
                    f"connections {us:7.1f} server CPU us/connection"
                )
    ratios = [a / b for a, b in zip(samples["acceptor"], samples["reuseport"], strict=True)]
    return {
        "workers": tcp_accept.WORKERS,
        "connections_per_round": cfg.accept_connections,
        "designs": {d: {"samples_us": v, **spread(v)} for d, v in samples.items()},
        "acceptor_over_reuseport": {"per_round": ratios, **spread(ratios)},
    }


# -- the run ---------------------------------------------------------------------------------------
def expected_run_s(cfg: BenchConfig) -> float:
    accept = 2 * cfg.accept_rounds * cfg.accept_step_s() if cfg.accept else 0.0
    return 2 * cfg.rounds * cfg.window_step_s() + accept + 5.0


def run(cfg: BenchConfig, echo: Echo = click.echo) -> dict[str, Any]:
    started = utc_now()
    notes: list[str] = []
    steps = [cfg.window_step_s()] * (2 * cfg.rounds)
    if cfg.accept:
        steps += [cfg.accept_step_s()] * (2 * cfg.accept_rounds)
    progress = Progress(steps, echo, cfg.quick)
    progress.announce(
        f"measuring {cfg.rounds} rounds x udp, tcp at {cfg.rate_fps:,} frames/s"
        + (f", then {cfg.accept_rounds} rounds x 2 accept designs" if cfg.accept else "")
    )
    with own_cpus_restored() as allowed:
        frames = frames_section(cfg, allowed, notes, progress, echo)
    # Forked only now: the frames section's threads (the stand-in's) are gone.
    accept = accept_section(cfg, progress) if cfg.accept else {"skipped": "--no-accept"}
    result = run_header("relay_tcp", started, allowed, cfg)
    result["notes"] = notes
    result["cpus"] = frames.pop("cpus")
    result["frames"] = frames
    result["accept"] = accept
    result["criteria"] = criteria(result)
    return result


def criteria(result: dict[str, Any]) -> list[dict[str, Any]]:
    ratio = result["frames"]["tcp_over_udp"]
    out = [
        spread_criterion(
            f"cpu per frame tcp/udp <= {TCP_OVER_UDP_MAX}",
            ratio,
            ratio["median"] <= TCP_OVER_UDP_MAX,
            "at the same offered load",
        )
    ]
    if "skipped" not in result["accept"]:
        acc = result["accept"]["acceptor_over_reuseport"]
        out.append(
            spread_criterion(
                f"server cpu per connection acceptor/reuseport >= {ACCEPTOR_OVER_REUSEPORT_MIN}",
                acc,
                acc["median"] >= ACCEPTOR_OVER_REUSEPORT_MIN,
            )
        )
    return out


def spread_criterion(name: str, ratio: dict[str, Any], ok: bool, how: str = "") -> dict[str, Any]:
    """A criterion on the median of per-round ratios; not met without a counted round."""
    detail = (
        f"median {ratio['median']:.2f} (min {ratio['min']:.2f}, max {ratio['max']:.2f}) over "
        f"{ratio['n']} rounds" + (f" {how}" if how else "")
    )
    if ratio["n"] == 0:
        detail = "no round counted: the load generator fell behind its rate in every window"
    return {
        "name": name,
        "value": ratio["median"],
        "pass": bool(ratio["n"] > 0 and ok),
        "detail": detail,
    }


# -- the report ------------------------------------------------------------------------------------
def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"relay_tcp: {cfg['rounds']} rounds x {cfg['window_s']} s per transport at "
        f"{cfg['rate_fps']:,} frames/s, {cfg['flows']} flows each, {cfg['payload_bytes']}-byte "
        f"payloads, 1 relay worker on CPU {result['cpus']['worker']}, generator on CPUs "
        f"{result['cpus']['generator']}"
    )
    echo(
        f"{'transport':10} {'CPU us/frame median (min-max)':32} {'worker busy':>12} "
        f"{'frames':>10} {'counted':>8}"
    )
    for name, t in result["frames"]["transports"].items():
        s = t["summary"]
        busy = s["worker_busy"]["median"]
        echo(
            f"{name:10} {fmt_spread(s['cpu_us_per_frame'], '{:.3f}'):32} "
            f"{'-' if s['worker_busy']['n'] == 0 else f'{100 * busy:.1f}%':>12} "
            f"{s['frames_forwarded']:>10,} {s['counted_rounds']:>5}/{s['rounds']}"
        )
    ratio = result["frames"]["tcp_over_udp"]
    per_round = ", ".join(f"{x['ratio']:.2f}" for x in ratio["per_round"])
    echo(f"CPU per frame tcp/udp: {fmt_spread(ratio, '{:.2f}')}; per round: {per_round or '-'}")
    accept = result["accept"]
    echo("")
    if "skipped" in accept:
        echo(f"accept designs: skipped ({accept['skipped']})")
    else:
        echo(
            f"accept designs, {accept['workers']} workers, {accept['connections_per_round']} "
            "connections per round (server CPU us/connection):"
        )
        for name, d in accept["designs"].items():
            echo(f"{name:10} {fmt_spread(d, '{:.1f}')}")
        echo(f"acceptor/reuseport: {fmt_spread(accept['acceptor_over_reuseport'], '{:.2f}')}")
    echo("")
    for line in verdict_lines(result):
        echo(line)


EXAMPLES = """
\b
Examples:
  rtcedge bench tcp                  # 6 rounds x 3 s per transport, then the accept designs
  rtcedge bench tcp --quick          # smoke test: 2 rounds of 1 s, a short accept section
  rtcedge bench tcp --rate 20000 --no-accept
\b
Prints a line per window as it goes, then a table and PASS/FAIL for its criteria (a --quick run
does not judge them), writes the JSON result and its plot, and exits 0 whatever the figures are.
"""


@click.command("tcp", epilog=EXAMPLES)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=6,
    show_default=True,
    help="Interleaved rounds; each transport gets one window per round, and each accept design "
    "one round of connections.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1, max=60),
    default=3.0,
    show_default=True,
    help="Length of one window.",
)
@click.option(
    "--rate",
    type=click.IntRange(min=1000, max=500_000),
    default=40_000,
    show_default=True,
    help="Frames per second offered in every window, both transports (below what one worker "
    "takes over TCP, so that both windows do the same work).",
)
@click.option(
    "--flows",
    type=click.IntRange(min=1, max=1000),
    default=50,
    show_default=True,
    help="UDP flows, and as many TCP connections.",
)
@click.option(
    "--payload",
    type=click.IntRange(min=16, max=1400),
    default=172,
    show_default=True,
    help="Datagram size in bytes (RTP-like, first byte 0x80); a TCP frame adds 2.",
)
@click.option(
    "--max-frames",
    type=click.IntRange(min=1000),
    default=2_000_000,
    show_default=True,
    help="Frame bound of one window.",
)
@click.option(
    "--connections",
    type=click.IntRange(min=10, max=100_000),
    default=2000,
    show_default=True,
    help="Connections per round and accept design.",
)
@click.option("--no-accept", is_flag=True, help="Leave out the accept designs' section.")
@out_option
@click.option(
    "--quick",
    is_flag=True,
    help="2 rounds of 1 s, 300 connections: a smoke test, not a measurement.",
)
def tcp_bench(
    rounds: int,
    seconds: float,
    rate: int,
    flows: int,
    payload: int,
    max_frames: int,
    connections: int,
    no_accept: bool,
    out_dir: str,
    quick: bool,
) -> None:
    """CPU per frame over ICE-TCP vs UDP through one relay worker; accept designs."""
    if quick:
        rounds, seconds, connections = 2, 1.0, 300
    cfg = BenchConfig(
        rounds=rounds,
        window_s=seconds,
        rate_fps=rate,
        flows=flows,
        payload_bytes=payload,
        max_frames_per_window=max_frames,
        accept=not no_accept,
        accept_rounds=rounds,
        accept_connections=connections,
        out_dir=out_dir,
        quick=quick,
    )
    run_and_report("relay_tcp", lambda: run(cfg), print_report, cfg.out_dir, relay_tcp_figure)


if __name__ == "__main__":
    tcp_bench()
