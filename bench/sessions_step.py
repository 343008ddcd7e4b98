"""One step of the sessions benchmark: what is measured of N concurrent calls, and the verdict.

A ``Snapshot`` holds the counters of every process at one moment (CPU time from /proc, the
transceiver's frame counters, the CPUs' idle time); two of them bound a step's window, and the
callers' own counts over the same window come from their marks. ``measure`` turns both into the
figures of a ``Step``; ``attribute_limit`` names what ran out from evidence other than the loss;
``finish`` gives the verdict. ``bench/sessions.py`` runs the steps.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from bench.harness.stats import median_worst, percentile
from testbed.caller_workers import WorkerProcess
from testbed.processes import RelayProcess, TransceiverProcess, metric_value
from testbed.procfs import core_pct, cpu_idle_s, cpu_ns, process_cpu_ns, rss_bytes, udp_drops

FRAME_S = 0.02
TRANSCEIVER_SATURATED_PCT = 95.0  # of its core: the step is the transceiver's limit
CLIENTS_SATURATED_PCT = 90.0  # busy time of the callers' CPUs: the callers may be the limit
DISTURBED_PCT = 10.0  # others' work on our CPUs, % of a core, that earns a step a second try


@dataclass
class Processes:
    """What a step measures: the transceiver, the relay and its workers, the caller workers, and
    the CPUs they run on ("transceiver": its core; "clients": the callers' and the relay's)."""

    trx: TransceiverProcess
    relay: RelayProcess
    relay_pids: list[int]
    workers: list[WorkerProcess]
    cpus: dict[str, set[int]]


@dataclass
class Snapshot:
    t: float
    transceiver_ns: int
    transceiver_wait_ns: int
    transceiver_threads: int
    transceiver_rss: int  # bytes
    workers_ns: int
    workers_wait_ns: int
    relay_ns: int
    own_ns: int  # this process and the relay's supervisor: our other work on the callers' CPUs
    idle_s: dict[int, float]
    frames_in: float
    frames_out: float
    transceiver_socket_drops: int
    relay_drops: float
    loop_lag_s: float  # the transceiver's admission inputs (transceiver.headroom), NaN: unknown
    cpu_ratio: float

    @staticmethod
    def take(procs: Processes) -> Snapshot:
        trx, relay = procs.trx, procs.relay
        assert trx.proc is not None
        # An overloaded transceiver may not answer its HTTP port in time: the frame counters
        # are then unknown (NaN), the CPU figures still come from /proc.
        text = ""
        with contextlib.suppress(OSError):
            text = trx.http("/metrics", port=trx.metrics_port)[1]
        relay_drops = math.nan
        with contextlib.suppress(OSError):
            relay_drops = relay.metric("rtcedge_relay_dropped_packets_total")
        trx_ns, trx_wait_ns = process_cpu_ns(trx.proc.pid)
        per_worker = [process_cpu_ns(w.pid) for w in procs.workers]
        return Snapshot(
            t=time.monotonic(),
            transceiver_ns=trx_ns,
            transceiver_wait_ns=trx_wait_ns,
            transceiver_threads=len(os.listdir(f"/proc/{trx.proc.pid}/task")),
            transceiver_rss=rss_bytes(trx.proc.pid),
            workers_ns=sum(on for on, _ in per_worker),
            workers_wait_ns=sum(wait for _, wait in per_worker),
            relay_ns=sum(cpu_ns(p) for p in procs.relay_pids),
            own_ns=process_cpu_ns(os.getpid())[0]
            + (process_cpu_ns(relay.proc.pid)[0] if relay.proc else 0),
            idle_s=cpu_idle_s(),
            frames_in=_frames(text, "in"),
            frames_out=_frames(text, "out"),
            transceiver_socket_drops=udp_drops(trx.media_port),
            relay_drops=relay_drops,
            loop_lag_s=_gauge(text, "rtcedge_transceiver_loop_lag_seconds"),
            cpu_ratio=_gauge(text, "rtcedge_transceiver_cpu_ratio"),
        )


def _frames(metrics_text: str, direction: str) -> float:
    if not metrics_text:
        return math.nan
    return metric_value(metrics_text, "rtcedge_transceiver_audio_frames_total", direction=direction)


def _gauge(metrics_text: str, name: str) -> float:
    return metric_value(metrics_text, name) if metrics_text else math.nan


def busy_pct(a: Snapshot, b: Snapshot, cpus: set[int]) -> float:
    """Busy time of ``cpus`` between two snapshots, everyone's work, in % of one core."""
    wall_s = b.t - a.t
    idle_s = sum(b.idle_s[c] - a.idle_s[c] for c in cpus)
    return max(0.0, 100.0 * (len(cpus) * wall_s - idle_s) / wall_s) if wall_s > 0 else math.nan


# -- one step ------------------------------------------------------------------------------------
@dataclass
class Step:
    sessions: int
    audio_format: str = "pcm16"  # the echo backend's (transceiver serve --audio-format)
    attempt: int = 1
    connected: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    window_s: float = 0.0
    connect_ms: dict[str, float] = field(default_factory=dict)
    first_echo_ms: dict[str, float] = field(default_factory=dict)
    frame_loss_pct: dict[str, float] = field(default_factory=dict)  # median, worst over calls
    rtp_loss_pct: dict[str, float] = field(default_factory=dict)
    calls_over_loss: int = 0
    calls_without_echo: int = 0
    calls_hearing_others: int = 0
    transceiver_cpu_pct: float = math.nan  # of one core, over the window
    cpu_per_session_pct: float = math.nan
    transceiver_wait_pct: float = math.nan  # its threads runnable but not running, % of wall
    transceiver_threads: int = 0
    transceiver_rss_mb: float = math.nan  # at the window's end, N calls up
    transceiver_core_busy_pct: float = math.nan  # everything on its CPU (others' work too)
    clients_cpu_pct: float = math.nan  # the caller workers' own CPU time, % of one core
    clients_wait_pct: float = math.nan
    clients_cores_busy_pct: float = math.nan  # everything on the callers' CPUs, % of one core
    relay_cpu_pct: float = math.nan
    # Busy time on our CPUs that none of our processes used: the shared machine's other work.
    others_on_transceiver_core_pct: float = math.nan
    others_on_callers_cores_pct: float = math.nan
    # Where frames went missing: sent by the callers, decoded by the transceiver, echoed.
    callers_sent_per_s: float = math.nan
    transceiver_frames_in_per_s: float = math.nan
    transceiver_frames_out_per_s: float = math.nan
    transceiver_socket_drops: int = 0  # kernel drops at its UDP socket (it did not read in time)
    # Echo delay added by the transceiver's playback queue, mean per session, at the window's
    # start and end (its audio_frames in - out counters); and per call, how much later the
    # echo got over the window (frames sent - frames heard back).
    echo_queue_ms: dict[str, float] = field(default_factory=dict)
    echo_lag_growth_ms: dict[str, float] = field(default_factory=dict)
    echo_lag_ms: dict[str, float] = field(default_factory=dict)
    # How late each call's echo is (testbed.callers.EchoCounter.echo_delay_ms, over the
    # window): p50/p95/worst over the calls, and how many calls it could not be measured for.
    echo_delay_ms: dict[str, float] = field(default_factory=dict)
    relay_drops: float = 0.0
    # What the transceiver's admission saw at the window's end (its gauges: transceiver.headroom).
    loop_lag_ms: float = math.nan
    admission_cpu_pct: float = math.nan
    sessions_active_after: float = math.nan
    # Who ran out: "transceiver" (its core full, or it decoded fewer frames than were sent),
    # "callers" (their CPUs full, or they sent late), "transceiver+callers", or "".
    limit: str = ""
    limit_evidence: list[str] = field(default_factory=list)
    ok: bool = False
    stop_reason: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


def spread_ms(values: list[float]) -> dict[str, float]:
    ms = sorted(1000 * v for v in values)
    return {"p50": percentile(ms, 0.5), "p95": percentile(ms, 0.95), "n": len(ms)}


def measure(
    step: Step,
    calls: dict[int, dict[str, Any]],
    marks: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    snaps: tuple[Snapshot, Snapshot, Snapshot],
    cpus: dict[str, set[int]],
) -> None:
    """Per call: frames and RTP packets between its worker's two ``marks``; for the processes:
    CPU time and frame counters between the window's two snapshots (``snaps``: before the calls,
    at the window's start, at its end); then who ran out."""
    for ma, mb in zip(*marks, strict=True):
        for key, counts in ma["calls"].items():
            calls[int(key)].update(call_figures(counts, mb["calls"][key], mb["t"] - ma["t"]))
    base, a, b = snaps
    cpu_figures(step, a, b, cpus)
    frame_figures(step, calls, base, a, b)
    attribute_limit(step, len(cpus["clients"]))


def call_figures(counts_a: list[int], counts_b: list[int], window_s: float) -> dict[str, float]:
    """One call's loss and echo lag from its counters (RTP received, RTP expected, audible
    echo frames, frames sent) at the two marks ``window_s`` apart."""
    recv_a, exp_a, audio_a, sent_a = counts_a
    recv_b, exp_b, audio_b, sent_b = counts_b
    expected_frames = window_s / FRAME_S
    rtp_expected = exp_b - exp_a
    return {
        "window_s": window_s,
        "sent_frames": sent_b - sent_a,
        "echo_frames": audio_b - audio_a,
        # Frames sent but not (yet) heard back: how much later the echo got over the window, and
        # how late it was at the window's end (since the call began: an upper bound, it counts
        # frames lost before the first echo too).
        "echo_lag_growth_ms": 1000 * FRAME_S * ((sent_b - sent_a) - (audio_b - audio_a)),
        "echo_lag_ms": 1000 * FRAME_S * (sent_b - audio_b),
        "expected_frames": expected_frames,
        "frame_loss_pct": 100.0 * (1 - (audio_b - audio_a) / expected_frames),
        "rtp_packets": recv_b - recv_a,
        "rtp_lost": rtp_expected - (recv_b - recv_a),
        "rtp_loss_pct": (
            100.0 * (rtp_expected - (recv_b - recv_a)) / rtp_expected if rtp_expected > 0 else 100.0
        ),
    }


def cpu_figures(step: Step, a: Snapshot, b: Snapshot, cpus: dict[str, set[int]]) -> None:
    """CPU time of each group of processes over the window, and others' work on our CPUs."""
    wall_s = b.t - a.t
    step.window_s = wall_s
    step.transceiver_cpu_pct = core_pct(b.transceiver_ns - a.transceiver_ns, wall_s)
    step.cpu_per_session_pct = step.transceiver_cpu_pct / step.sessions
    step.transceiver_wait_pct = core_pct(b.transceiver_wait_ns - a.transceiver_wait_ns, wall_s)
    step.transceiver_threads = b.transceiver_threads
    step.transceiver_rss_mb = b.transceiver_rss / 2**20
    step.transceiver_core_busy_pct = busy_pct(a, b, cpus["transceiver"])
    step.clients_cpu_pct = core_pct(b.workers_ns - a.workers_ns, wall_s)
    step.clients_wait_pct = core_pct(b.workers_wait_ns - a.workers_wait_ns, wall_s)
    step.clients_cores_busy_pct = busy_pct(a, b, cpus["clients"])
    step.relay_cpu_pct = core_pct(b.relay_ns - a.relay_ns, wall_s)
    own_pct = core_pct(b.own_ns - a.own_ns, wall_s)
    step.others_on_transceiver_core_pct = max(
        0.0, step.transceiver_core_busy_pct - step.transceiver_cpu_pct
    )
    step.others_on_callers_cores_pct = max(
        0.0, step.clients_cores_busy_pct - step.clients_cpu_pct - step.relay_cpu_pct - own_pct
    )


def frame_figures(
    step: Step, calls: dict[int, dict[str, Any]], base: Snapshot, a: Snapshot, b: Snapshot
) -> None:
    """Where frames went over the window: sent by the callers, decoded and echoed by the
    transceiver, queued for playback, heard back late."""
    wall_s = step.window_s
    step.callers_sent_per_s = sum(
        c["sent_frames"] / c["window_s"] for c in calls.values() if "sent_frames" in c
    )
    step.transceiver_frames_in_per_s = (b.frames_in - a.frames_in) / wall_s
    step.transceiver_frames_out_per_s = (b.frames_out - a.frames_out) / wall_s
    step.transceiver_socket_drops = b.transceiver_socket_drops - a.transceiver_socket_drops
    # Every frame the echo backend takes in is queued for playback until the paced outbound
    # track takes it: decoded-in minus played-out since the calls began is that queue.
    for name, snap in (("start", a), ("end", b)):
        queued = (snap.frames_in - base.frames_in) - (snap.frames_out - base.frames_out)
        step.echo_queue_ms[name] = 1000 * FRAME_S * queued / step.sessions
    growth = [c["echo_lag_growth_ms"] for c in calls.values() if "echo_lag_growth_ms" in c]
    step.echo_lag_growth_ms = median_worst(growth)
    lags = sorted(c["echo_lag_ms"] for c in calls.values() if "echo_lag_ms" in c)
    step.echo_lag_ms = median_worst(lags)
    if lags:
        step.echo_lag_ms["p95"] = percentile(lags, 0.95)
    step.relay_drops = b.relay_drops - a.relay_drops
    step.loop_lag_ms = 1000 * b.loop_lag_s
    step.admission_cpu_pct = 100 * b.cpu_ratio


def attribute_limit(step: Step, client_cores: int) -> None:
    """Name what ran out, from evidence that does not depend on the loss itself."""
    evidence: dict[str, list[str]] = {"transceiver": [], "callers": []}
    planned = step.sessions / FRAME_S
    if step.transceiver_cpu_pct >= TRANSCEIVER_SATURATED_PCT:
        evidence["transceiver"].append(f"it used {step.transceiver_cpu_pct:.0f}% of its core")
    elif step.transceiver_core_busy_pct >= TRANSCEIVER_SATURATED_PCT:
        evidence["transceiver"].append(
            f"its core was {step.transceiver_core_busy_pct:.0f}% busy (others' work included)"
        )
    if step.transceiver_frames_in_per_s < 0.99 * step.callers_sent_per_s:
        evidence["transceiver"].append(
            f"it decoded {step.transceiver_frames_in_per_s:.0f} of the "
            f"{step.callers_sent_per_s:.0f} frames/s sent"
        )
    if step.transceiver_socket_drops:
        evidence["transceiver"].append(f"{step.transceiver_socket_drops} drops at its socket")
    if step.clients_cores_busy_pct >= CLIENTS_SATURATED_PCT * client_cores:
        evidence["callers"].append(
            f"their CPU was {step.clients_cores_busy_pct:.0f}% busy (relay, others included)"
        )
    if step.callers_sent_per_s < 0.99 * planned:
        evidence["callers"].append(
            f"they sent {step.callers_sent_per_s:.0f} of {planned:.0f} frames/s on time"
        )
    step.limit = "+".join(k for k, v in evidence.items() if v)
    step.limit_evidence = [f"{k}: {e}" for k, v in evidence.items() for e in v]


def finish(step: Step, calls: dict[int, dict[str, Any]], max_loss_pct: float) -> None:
    """Summaries over the calls and the step's verdict."""
    step.calls = [calls[k] for k in sorted(calls)]
    measured = [c for c in step.calls if "frame_loss_pct" in c]
    step.connect_ms = spread_ms(
        [c["offer_to_connected_s"] for c in step.calls if c["offer_to_connected_s"] is not None]
    )
    step.first_echo_ms = spread_ms(
        [c["offer_to_first_echo_s"] for c in step.calls if c["offer_to_first_echo_s"] is not None]
    )
    delays = sorted(c["echo_delay_ms"] for c in step.calls if c.get("echo_delay_ms") is not None)
    if delays:
        step.echo_delay_ms = {
            "p50": percentile(delays, 0.5),
            "p95": percentile(delays, 0.95),
            "worst": delays[-1],
            "unmeasured": float(len(step.calls) - len(delays)),
        }
    if measured:
        losses = [c["frame_loss_pct"] for c in measured]
        rtp = [c["rtp_loss_pct"] for c in measured]
        step.frame_loss_pct = median_worst(losses)
        step.rtp_loss_pct = median_worst(rtp)
        step.calls_over_loss = sum(x >= max_loss_pct for x in losses)
        step.calls_without_echo = sum(c["offer_to_first_echo_s"] is None for c in measured)
        step.calls_hearing_others = sum(c["tone_checks_own"] < c["tone_checks"] for c in measured)
    # A saturated transceiver may still pass every frame, but late (its queues grow, see
    # echo_lag_ms): no headroom is not a capacity, so such a step does not count.
    step.ok = bool(
        measured
        and len(measured) == step.sessions
        and step.calls_over_loss == 0
        and step.calls_without_echo == 0
        and step.calls_hearing_others == 0
        and step.transceiver_cpu_pct < TRANSCEIVER_SATURATED_PCT
    )
    if step.stop_reason:
        return
    if not measured:
        step.stop_reason = "nothing measured"
    elif step.calls_hearing_others:
        step.stop_reason = f"{step.calls_hearing_others} calls heard a tone not their own"
    elif step.calls_without_echo:
        step.stop_reason = f"{step.calls_without_echo} calls never heard their echo"
    elif step.calls_over_loss:
        step.stop_reason = (
            f"{step.calls_over_loss} calls lost >= {max_loss_pct:g}% of their frames"
            + (f" (limit: {step.limit})" if step.limit else "")
        )
    elif step.transceiver_cpu_pct >= TRANSCEIVER_SATURATED_PCT:
        lag = step.echo_lag_ms.get("worst", math.nan)
        step.stop_reason = (
            f"transceiver saturated: {step.transceiver_cpu_pct:.0f}% of its core, "
            f"echo up to {lag:.0f} ms late"
        )


def disturbed(step: Step) -> bool:
    """A step that lost frames while the shared machine's other work took a real share of our
    CPUs deserves a second attempt; connect failures and cross-talk never do."""
    return (
        step.failed == 0
        and step.transceiver_cpu_pct < TRANSCEIVER_SATURATED_PCT  # else it is its own limit
        and step.calls_hearing_others == 0
        and step.calls_without_echo == 0
        and max(step.others_on_transceiver_core_pct, step.others_on_callers_cores_pct)
        >= DISTURBED_PCT
    )
