"""Connect benchmark: how fast a call connects, alone and 20 at once, and its memory.

``rtcedge bench connect`` checks the acceptance criteria of issue 12 item 4 with aiortc callers
(the Chromium figures come from ``tests/transceiver/browser_harness.py --repeat N``): a single
call's POST -> answer <= 10 ms and answer -> connected <= 20 ms (p50), 20 calls connecting at
once: connect p95 <= 100 ms; and it reports the memory a call costs.

Method. The relay and one transceiver (echo backend, pcm16) on 127.0.0.1, started and pinned as
``bench sessions`` does (``bench.sessions.start_services``: the transceiver on the first allowed
CPU, the relay worker and the callers on the others), admission by load off (the burst would
otherwise be refused in part, which is not what is measured here). Callers are real aiortc peer
connections in worker processes (``testbed/caller_workers.py``) sending an Opus tone, each
with a data channel. They are light callers by default (``--callers light``): their ICE
reports connected as soon as its check list completes, as a browser's does
(``testbed.callers.prompt_ice``; stock aioice waits for its next 20 ms tick, which adds
0-20 ms of the caller's own to every figure after the answer), and the callers of a worker
process share one DTLS certificate (aiortc makes one per peer connection): 20 callers
connecting at once on one CPU then measure the transceiver rather than aiortc's client side.
``--callers stock`` measures stock aiortc callers.

1. Single calls: one warm-up call, then ``--calls`` calls one after another, each alone (the
   previous one hung up and gone): POST -> answer (the answer read), -> the caller's ICE
   connected, -> connected (DTLS: media may flow), -> the first echo of its own tone, ->
   its data channel open; p50 and p95 of each step. The connect CPU of each (issue 26 item 4):
   the transceiver's CPU time (``/proc/<pid>/task/*/schedstat``, every thread) from just before
   the caller is told to connect to its reply (connected and its data channel open), less
   what the idle transceiver spends in as long (its rate measured over ``IDLE_S`` with no
   call, after the warm-up): offer, answer, ICE, DTLS, SCTP and the data channel's opening,
   and whatever audio came before the reply (the first frames, if any); p50 and p95 over the
   calls. The first echo is waited for after that reading (``ECHO_WAIT_S``), and the call's
   marks are taken from its hang-up. Beside it, the transceiver's own view of the same
   calls: the mean of each step of its ``rtcedge_transceiver_connect_phase_seconds`` histogram
   (null if it has none).
2. Bursts: ``--burst`` calls at once, spread over the caller processes, ``--bursts`` times one
   after another (pooled: the machine may be shared): POST -> answer and POST -> connected, p50
   and p95.
3. Memory: the transceiver's resident memory (VmRSS) with no call (after the single calls), with
   the burst's calls still connected and after ``--burst`` more (also at once), each read after
   ``settle_s`` of echo; the least-squares slope is the memory per call.

Bounded: every wait has a timeout, the run a deadline; every process is stopped by PID.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.harness.bounds import Deadline
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import percentile
from bench.harness.verdict import verdict_lines
from bench.plots.connect import connect_figure
from bench.sessions import (
    FIRST_TONE_HZ,
    TONE_STEP_HZ,
    BenchConfig,
    plan_cpus,
    start_services,
    wait_sessions_ended,
)
from testbed.caller_workers import (
    WorkerProcess,
    callers_option,
    connect,
    hang_up,
    prepare_tones,
    start_workers,
)
from testbed.processes import TransceiverProcess
from testbed.procfs import process_cpu_ns, rss_bytes
from transceiver.metrics import CONNECT_PHASES as PHASES

POST_TO_ANSWER_MS = 10.0  # the criteria (single call, p50; burst, p95)
ANSWER_TO_CONNECTED_MS = 20.0
BURST_CONNECT_P95_MS = 100.0
CONNECT_CPU_MS = 3.0  # the transceiver's CPU per connect, p50 of single calls (issue 26)
IDLE_S = 1.0  # the idle transceiver's CPU is measured over this long, before the single calls
ECHO_WAIT_S = 0.3  # a single call's first echo, waited for after its connect CPU is read
# A single call's steps, from the caller's marks (testbed.caller_workers.EchoCall.summary).
SINGLE_STEPS = {
    "post_to_answer": ("offer_to_answer_s", None),
    "answer_to_ice": ("offer_to_ice_s", "offer_to_answer_s"),
    "ice_to_connected": ("offer_to_connected_s", "offer_to_ice_s"),
    "connected_to_first_echo": ("offer_to_first_echo_s", "offer_to_connected_s"),
    "answer_to_connected": ("offer_to_connected_s", "offer_to_answer_s"),
    "post_to_connected": ("offer_to_connected_s", None),
    "post_to_channel_open": ("offer_to_channel_open_s", None),
}
PHASE_METRIC = "rtcedge_transceiver_connect_phase_seconds"
METHOD = {
    "single": "K calls one after another, each alone, after one warm-up call; times from the "
    "caller's marks: POST sent, answer read, its ICE connected, connectionState connected, "
    "first echo of its own tone",
    "connect_cpu": "per single call: the transceiver's CPU time (schedstat, all threads) from "
    "the connect command to its reply (connected, data channel open), less the idle "
    "transceiver's CPU rate (measured over IDLE_S with no call) times that window; p50/p95",
    "transceiver_phases": "mean per step of the transceiver's connect_phase histogram over the "
    "same K calls (docs/transceiver.md, Metrics)",
    "burst": "B calls at once over the caller processes (one CPU), R times one after another "
    "(pooled; each burst's p95 apart): POST -> answer, POST -> connected; CPU time of the "
    "transceiver and of the callers from the POSTs to the last call connected, mean per burst",
    "memory": "transceiver VmRSS with 0, B, 2B connected echo calls, least-squares slope",
    "callers": "aiortc, Opus tone + data channel; light (default): ICE connected at completion "
    "(prompt_ice) and one DTLS certificate per caller process; stock: aiortc as it is",
}


@dataclass(frozen=True)
class ConnectConfig:
    calls: int = 50  # single calls, after one warm-up
    burst: int = 20  # calls at once; the memory steps add this many twice
    bursts: int = 3  # bursts, one after another, pooled (the machine may be shared)
    calls_per_worker: int = 10
    settle_s: float = 2.0  # of echo before reading the transceiver's memory
    echo_timeout_s: float = 3.0  # a single call's wait for its data channel to open
    connect_timeout_s: float = 15.0
    drain_timeout_s: float = 15.0
    max_seconds: float = 240.0
    idle_s: float = IDLE_S  # the idle transceiver's CPU rate is measured over this long
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False  # a smoke test: the criteria are not judged
    light_callers: bool = True  # testbed.caller_workers.CallerWorker: light or stock aiortc

    @property
    def workers(self) -> int:
        return max(1, math.ceil(2 * self.burst / self.calls_per_worker))


@dataclass
class Stage:
    """One stage's figures, as the result records them."""

    name: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ms: dict[str, dict[str, float]] = field(default_factory=dict)  # step -> p50/p95/n
    # The transceiver's own view of the same calls: mean ms per connect_phase (None: not seen).
    transceiver_phases_ms: dict[str, float | None] = field(default_factory=dict)
    # CPU time from the first POST to the last call connected, ms; for single calls, the mean
    # per call from its POST to connected with its data channel open (idle not subtracted).
    transceiver_cpu_ms: float = math.nan
    callers_cpu_ms: float = math.nan
    # Single calls: each connect's own CPU at the transceiver, idle subtracted (p50/p95/n), and
    # the idle rate subtracted, ms of CPU per s.
    connect_cpu_ms: dict[str, float] = field(default_factory=dict)
    idle_cpu_ms_per_s: float = math.nan
    p95_per_burst_ms: list[float] = field(default_factory=list)  # POST -> connected, each burst


def step_ms(calls: list[dict[str, Any]], end: str, start: str | None) -> list[float]:
    """A step's duration per call, ms, for the calls that have both marks."""
    out = []
    for c in calls:
        b, a = c.get(end), (c.get(start) if start else 0.0)
        if b is not None and a is not None:
            out.append((b - a) * 1000)
    return sorted(out)


def connect_cpu_ms(cpu_ns: int, wall_s: float, idle_ns_per_s: float) -> float:
    """A connect's own CPU, ms: the transceiver's CPU over the connect's window less what the
    idle transceiver spends in as long (its timers, its metrics), so that a slow caller does
    not count as the transceiver's cost."""
    return (cpu_ns - idle_ns_per_s * wall_s) / 1e6


def summarize_ms(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 0.5), "p95": percentile(values, 0.95), "n": len(values)}


def tone(call_id: int, slot: int) -> list[int]:
    """[id, tone Hz]: calls connected at the same time have different slots, so tones."""
    return [call_id, FIRST_TONE_HZ + TONE_STEP_HZ * slot]


def deal(
    ids: range, first_slot: int, workers: list[WorkerProcess]
) -> dict[WorkerProcess, list[list[int]]]:
    """Calls ``ids`` round robin over the workers that get any, tones from ``first_slot`` on."""
    shares: dict[WorkerProcess, list[list[int]]] = {w: [] for w in workers}
    for i, call_id in enumerate(ids):
        shares[workers[i % len(workers)]].append(tone(call_id, first_slot + i))
    return {w: share for w, share in shares.items() if share}


def phase_totals(trx: TransceiverProcess) -> dict[str, tuple[float, float]]:
    """The transceiver's connect_phase histogram: (sum, count) per phase, now."""
    text = trx.http("/metrics", port=trx.metrics_port)[1]
    out = {}
    for phase in PHASES:
        total = count = 0.0
        for line in text.splitlines():
            if f'phase="{phase}"' not in line:
                continue
            if line.startswith(PHASE_METRIC + "_sum"):
                total = float(line.rsplit(" ", 1)[1])
            elif line.startswith(PHASE_METRIC + "_count"):
                count = float(line.rsplit(" ", 1)[1])
        out[phase] = (total, count)
    return out


def phase_means_ms(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float | None]:
    means: dict[str, float | None] = {}
    for phase in PHASES:
        total = after[phase][0] - before[phase][0]
        count = after[phase][1] - before[phase][1]
        means[phase] = total / count * 1000 if count > 0 else None
    return means


# -- the stages ------------------------------------------------------------------------------------
def single_calls(cfg: ConnectConfig, trx: TransceiverProcess, worker: WorkerProcess) -> Stage:
    """One warm-up call, the idle transceiver's CPU rate, then ``cfg.calls`` calls one after
    another, each alone."""
    assert trx.proc is not None
    stage = Stage("single")
    before: dict[str, tuple[float, float]] = {}
    cpu_ns = 0
    idle_ns_per_s = 0.0
    connects: list[float] = []
    for i in range(cfg.calls + 1):
        if i == 1:
            idle_ns_per_s = idle_rate_ns(trx.proc.pid, cfg.idle_s)
            before = phase_totals(trx)
        start_ns, start_s = process_cpu_ns(trx.proc.pid)[0], time.monotonic()
        connect(
            {worker: [tone(i, 0)]},
            trx.url,
            cfg.connect_timeout_s,
            light=cfg.light_callers,
            channel_s=cfg.echo_timeout_s,
        )
        used_ns, wall_s = process_cpu_ns(trx.proc.pid)[0] - start_ns, time.monotonic() - start_s
        if i > 0:
            cpu_ns += used_ns
            connects.append(connect_cpu_ms(used_ns, wall_s, idle_ns_per_s))
        time.sleep(ECHO_WAIT_S)  # its first echo (~10-25 ms after connected)
        call = hang_up([worker])[0]["calls"][0]
        wait_sessions_ended(trx, cfg.drain_timeout_s)
        if call["error"]:
            stage.errors.append(call["error"])
        if i > 0:
            stage.calls.append(call)
    stage.transceiver_phases_ms = phase_means_ms(before, phase_totals(trx))
    stage.transceiver_cpu_ms = cpu_ns / 1e6 / max(1, cfg.calls)
    stage.connect_cpu_ms = summarize_ms(sorted(connects))
    stage.idle_cpu_ms_per_s = idle_ns_per_s / 1e6
    for step, (end, start) in SINGLE_STEPS.items():
        stage.ms[step] = summarize_ms(step_ms(stage.calls, end, start))
    return stage


def burst(
    name: str,
    ids: range,
    first_slot: int,
    cfg: ConnectConfig,
    trx: TransceiverProcess,
    workers: list[WorkerProcess],
) -> Stage:
    """``ids`` calls at once; they stay connected."""
    assert trx.proc is not None
    stage = Stage(name)
    shares = deal(ids, first_slot, workers)
    prepare_tones(shares)
    trx_ns, callers_ns = process_cpu_ns(trx.proc.pid)[0], callers_cpu_ns(workers)
    for reply in connect(shares, trx.url, cfg.connect_timeout_s, light=cfg.light_callers):
        stage.calls += reply["calls"]
    stage.transceiver_cpu_ms = (process_cpu_ns(trx.proc.pid)[0] - trx_ns) / 1e6
    stage.callers_cpu_ms = (callers_cpu_ns(workers) - callers_ns) / 1e6
    stage.errors = sorted({c["error"] for c in stage.calls if c["error"]})[:5]
    for step in ("post_to_answer", "post_to_connected"):
        end, start = SINGLE_STEPS[step]
        stage.ms[step] = summarize_ms(step_ms(stage.calls, end, start))
    return stage


def bursts(
    cfg: ConnectConfig,
    trx: TransceiverProcess,
    workers: list[WorkerProcess],
    memory: list[dict[str, float]],
) -> Stage:
    """``cfg.bursts`` bursts of ``cfg.burst`` calls at once, each alone (the one before hung
    up); the last one's calls stay connected. The calls pooled, each burst's p95 apart, the CPU
    a mean per burst. Appends the memory with no call, just before the last burst (the memory
    the earlier ones left in the allocator is then in every point)."""
    stage = Stage("burst")
    warm_up(cfg, trx, workers)
    for r in range(cfg.bursts):
        if r:
            hang_up(workers)
            wait_sessions_ended(trx, cfg.drain_timeout_s)
        if r == cfg.bursts - 1:
            memory.append(memory_point(trx, 0, 0.5))
        first_id = 1000 + 100 * r
        one = burst("burst", range(first_id, first_id + cfg.burst), 0, cfg, trx, workers)
        stage.calls += one.calls
        stage.errors = sorted({*stage.errors, *one.errors})[:5]
        stage.p95_per_burst_ms.append(one.ms["post_to_connected"]["p95"])
        for key in ("transceiver_cpu_ms", "callers_cpu_ms"):
            total = getattr(stage, key) if r else 0.0
            setattr(stage, key, total + getattr(one, key) / cfg.bursts)
    for step in ("post_to_answer", "post_to_connected"):
        end, start = SINGLE_STEPS[step]
        stage.ms[step] = summarize_ms(step_ms(stage.calls, end, start))
    return stage


def warm_up(cfg: ConnectConfig, trx: TransceiverProcess, workers: list[WorkerProcess]) -> None:
    """One call per caller worker, at once, hung up, not measured: the single calls warm the
    first worker only, so the first burst also measured the other workers' first use (their
    certificate, their first connections to the WHIP endpoint). Before this warm-up the first
    burst was the slowest in three runs out of three (p95 144-198 ms, the next ones 72-128);
    after it, in one of three (2026-12-02): the rest of the spread is the machine's."""
    shares = deal(range(900, 900 + len(workers)), 0, workers)
    prepare_tones(shares)
    connect(shares, trx.url, cfg.connect_timeout_s, light=cfg.light_callers)
    hang_up(workers)
    wait_sessions_ended(trx, cfg.drain_timeout_s)


def idle_rate_ns(pid: int, seconds: float) -> float:
    """The idle transceiver's CPU, ns per second, over ``seconds`` with no call (after a short
    settle: the hang-up before it may still be finishing)."""
    time.sleep(0.2)
    start_ns, start_s = process_cpu_ns(pid)[0], time.monotonic()
    time.sleep(seconds)
    return (process_cpu_ns(pid)[0] - start_ns) / (time.monotonic() - start_s)


def callers_cpu_ns(workers: list[WorkerProcess]) -> int:
    return sum(process_cpu_ns(w.pid)[0] for w in workers)


def memory_point(trx: TransceiverProcess, calls: int, settle_s: float) -> dict[str, float]:
    assert trx.proc is not None
    time.sleep(settle_s)
    active = trx.metric("rtcedge_transceiver_sessions_active")
    return {"calls": calls, "sessions_active": active, "rss_mb": rss_bytes(trx.proc.pid) / 2**20}


def memory_slope(points: list[dict[str, float]]) -> float | None:
    """MB per call: the least-squares slope of RSS over connected calls."""
    xs = [p["sessions_active"] for p in points]
    if len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, [p["rss_mb"] for p in points]).slope


# -- the run ---------------------------------------------------------------------------------------
def run(cfg: ConnectConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, run the stages, tear everything down (by PID) whatever happens."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        deadline = Deadline.after(cfg.max_seconds)
        started = utc_now()
        load_before = os.getloadavg()[0]
        notes: list[str] = []
        allowed = stack.enter_context(own_cpus_restored())
        cpus = plan_cpus(allowed, notes)
        trx_log: collections.deque[str] = collections.deque(maxlen=200)
        services = BenchConfig(sessions=(2 * cfg.burst,))
        trx, _relay = start_services(services, "pcm16", stack, cpus, trx_log, notes)
        assert trx.proc is not None
        workers = start_workers(cfg.workers, cfg.max_seconds + 60, Path(tmp), stack)
        for w in workers:
            pin_process(w.pid, cpus["clients"])
        echo(
            f"transceiver pid {trx.proc.pid} on CPU {sorted(cpus['transceiver'])}; relay and "
            f"{len(workers)} caller workers on CPU {sorted(cpus['clients'])}"
        )
        progress = Progress(
            [
                2.0 + cfg.idle_s + (0.1 + ECHO_WAIT_S) * cfg.calls,
                3.0 * cfg.bursts,
                2 * cfg.settle_s + 4.0,
            ],
            echo,
            cfg.quick,
        )
        progress.announce(
            f"{cfg.calls} single calls, {cfg.bursts} x {cfg.burst} calls at once, memory at "
            f"0/{cfg.burst}/{2 * cfg.burst} calls"
        )
        single = single_calls(cfg, trx, workers[0])
        progress.step(single_line(asdict(single)))
        memory: list[dict[str, float]] = []
        stages = [single]
        before = phase_totals(trx)
        first = bursts(cfg, trx, workers, memory)
        stages.append(first)
        memory.append(memory_point(trx, cfg.burst, cfg.settle_s))
        after = phase_totals(trx)  # the burst's calls have all sent and received audio by now
        first.transceiver_phases_ms = phase_means_ms(before, after)
        progress.step(burst_line(asdict(first)))
        if deadline.left_s() > cfg.connect_timeout_s + cfg.settle_s + 10:
            more = burst("burst_more", range(2000, 2000 + cfg.burst), cfg.burst, cfg, trx, workers)
            stages.append(more)
            memory.append(memory_point(trx, 2 * cfg.burst, cfg.settle_s))
            more.transceiver_phases_ms = phase_means_ms(after, phase_totals(trx))
            progress.step(memory_line(memory))
        else:
            notes.append(f"memory step skipped: the run's deadline ({cfg.max_seconds:.0f} s)")
            progress.skip()
        hang_up(workers)
        wait_sessions_ended(trx, cfg.drain_timeout_s)
        if trx.proc.poll() is not None:
            notes.append(f"the transceiver exited: {' | '.join(list(trx_log)[-5:])}")
    result = run_header("connect", started, allowed, cfg)
    result["cpus"] = {name: sorted(group) for name, group in cpus.items()}
    result["method"] = METHOD
    result["stages"] = [asdict(s) for s in stages]
    result["memory"] = {"points": memory, "mb_per_call": memory_slope(memory)}
    # The machine may be shared: a load well above what this run adds (~2) means others ran.
    result["load_average_1min"] = {"start": load_before, "end": os.getloadavg()[0]}
    result["notes"] = notes
    result["criteria"] = criteria(result)
    return result


def criteria(result: dict[str, Any]) -> list[dict[str, Any]]:
    stage = result["stages"][0]
    single = stage["ms"]
    out = [
        criterion(
            f"single call: POST -> answer p50 <= {POST_TO_ANSWER_MS:g} ms",
            single["post_to_answer"]["p50"],
            POST_TO_ANSWER_MS,
        ),
        criterion(
            f"single call: answer -> connected p50 <= {ANSWER_TO_CONNECTED_MS:g} ms",
            single["answer_to_connected"]["p50"],
            ANSWER_TO_CONNECTED_MS,
        ),
        criterion(
            f"single call: the transceiver's connect CPU p50 <= {CONNECT_CPU_MS:g} ms",
            stage["connect_cpu_ms"].get("p50", math.nan),
            CONNECT_CPU_MS,
        ),
    ]
    bursts = [s for s in result["stages"] if s["name"] == "burst"]
    if bursts:
        b = bursts[0]
        n = len(b["calls"]) // max(1, len(b.get("p95_per_burst_ms") or [1]))
        out.append(
            criterion(
                f"{n} calls at once: connect (POST -> connected) p95 <= "
                f"{BURST_CONNECT_P95_MS:g} ms",
                b["ms"]["post_to_connected"]["p95"] if not b["errors"] else math.nan,
                BURST_CONNECT_P95_MS,
            )
        )
    return out


def criterion(name: str, value: float, limit: float) -> dict[str, Any]:
    measured = value is not None and math.isfinite(value)
    return {
        "name": name,
        "value_ms": value,
        "pass": measured and value <= limit,
        "detail": f"{value:.1f} ms" if measured else "not measured",
    }


# -- report ----------------------------------------------------------------------------------------
def _ms(d: dict[str, Any], key: str = "p50") -> str:
    v = d.get(key)
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.1f}"


def single_line(s: dict[str, Any]) -> str:
    ms = s["ms"]
    return (
        f"{len(s['calls'])} single calls, p50 ms: POST->answer {_ms(ms['post_to_answer'])}, "
        f"->ICE {_ms(ms['answer_to_ice'])}, ->connected {_ms(ms['ice_to_connected'])}, "
        f"->first echo {_ms(ms['connected_to_first_echo'])}; answer->connected "
        f"{_ms(ms['answer_to_connected'])}; the transceiver's connect CPU p50/p95 "
        f"{_ms(s['connect_cpu_ms'])}/{_ms(s['connect_cpu_ms'], 'p95')} ms (idle "
        f"{s['idle_cpu_ms_per_s']:.2f} ms/s subtracted)"
        + (f"; errors: {'; '.join(s['errors'][:3])}" if s["errors"] else "")
    )


def burst_line(s: dict[str, Any]) -> str:
    ms = s["ms"]
    each = "/".join(_ms({"v": v}, "v") for v in s["p95_per_burst_ms"])
    return (
        f"{len(s['p95_per_burst_ms'])} x {len(s['calls']) // max(1, len(s['p95_per_burst_ms']))}"
        f" calls at once, p50/p95 ms: POST->answer "
        f"{_ms(ms['post_to_answer'])}/{_ms(ms['post_to_answer'], 'p95')}, POST->connected "
        f"{_ms(ms['post_to_connected'])}/{_ms(ms['post_to_connected'], 'p95')} (p95 of each "
        f"burst {each}); CPU per burst: transceiver {s['transceiver_cpu_ms']:.0f} ms, callers' "
        f"{s['callers_cpu_ms']:.0f} ms"
        + (f"; errors: {'; '.join(s['errors'][:3])}" if s["errors"] else "")
    )


def memory_line(points: list[dict[str, float]]) -> str:
    slope = memory_slope(points)
    rss = ", ".join(f"{p['sessions_active']:.0f} calls {p['rss_mb']:.1f} MB" for p in points)
    return f"memory: {rss}; " + (f"{slope:.2f} MB per call" if slope is not None else "-")


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"connect: {'light' if cfg['light_callers'] else 'stock'} aiortc callers through the "
        f"relay into one transceiver (echo); transceiver "
        f"on CPU {result['cpus']['transceiver']}, callers + relay on CPU "
        f"{result['cpus']['clients']}"
    )
    for stage in result["stages"]:
        steps = "; ".join(f"{k} {_ms(v)}/{_ms(v, 'p95')}" for k, v in stage["ms"].items())
        echo(f"{stage['name']} ({len(stage['calls'])} calls), p50/p95 ms: {steps}")
        if stage["connect_cpu_ms"]:
            cpu = stage["connect_cpu_ms"]
            echo(
                f"  the transceiver's CPU per connect (POST -> connected and data channel open; "
                f"idle {stage['idle_cpu_ms_per_s']:.2f} ms/s subtracted), p50/p95: "
                f"{_ms(cpu)}/{_ms(cpu, 'p95')} ms over {cpu['n']} calls"
            )
        phases = stage["transceiver_phases_ms"]
        echo(
            "  transceiver's view, mean ms per step: "
            + ", ".join(f"{k} {'-' if v is None else f'{v:.1f}'}" for k, v in phases.items())
        )
    echo(memory_line(result["memory"]["points"]))
    load = result["load_average_1min"]
    echo(f"load average (1 min) at start {load['start']:.2f}, at end {load['end']:.2f}")
    for line in verdict_lines(result):
        echo(line)


EXAMPLES = """
\b
Examples:
  rtcedge bench connect                 # 50 single calls, 3 bursts of 20, memory at 0/20/40
  rtcedge bench connect --calls 20 --bursts 1
  rtcedge bench connect --quick         # smoke test: 3 single calls, bursts of 4
\b
Prints a line per stage as it goes, then PASS/FAIL per criterion (a --quick run does not judge
them), writes the JSON result and its plot, and exits 0 whatever the figures are.
"""


@click.command("connect", epilog=EXAMPLES)
@click.option(
    "--calls",
    type=click.IntRange(min=1, max=500),
    default=50,
    show_default=True,
    help="Single calls, one after another (after one warm-up call); each one's connect CPU.",
)
@click.option(
    "--burst",
    type=click.IntRange(min=1, max=30),
    default=20,
    show_default=True,
    help="Calls at once; the memory step adds as many again (each call its own tone).",
)
@click.option(
    "--bursts",
    type=click.IntRange(min=1, max=9),
    default=3,
    show_default=True,
    help="Bursts, one after another: their calls pooled (the machine may be shared).",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=30, max=3600),
    default=240.0,
    show_default=True,
    help="Deadline of the whole run.",
)
@callers_option
@out_option
@click.option("--quick", is_flag=True, help="3 single calls, bursts of 4: a smoke test.")
def connect_bench(
    calls: int,
    burst: int,
    bursts: int,
    max_seconds: float,
    callers: str,
    out_dir: str,
    quick: bool,
) -> None:
    """How fast calls connect, alone and at once, step by step; memory per call."""
    light = callers == "light"
    if quick:
        cfg = ConnectConfig(
            calls=3,
            burst=4,
            bursts=1,
            settle_s=0.5,
            idle_s=0.5,
            max_seconds=min(max_seconds, 80.0),
            out_dir=out_dir,
            quick=True,
            light_callers=light,
        )
    else:
        cfg = ConnectConfig(
            calls=calls,
            burst=burst,
            bursts=bursts,
            max_seconds=max_seconds,
            out_dir=out_dir,
            light_callers=light,
        )
    run_and_report("connect", lambda: run(cfg), print_report, cfg.out_dir, connect_figure)


if __name__ == "__main__":
    connect_bench()
