"""The sessions benchmark's overload step: more calls than the transceiver can carry, at once.

After the capacity steps (run with admission off: they measure the transceiver), a transceiver
with its admission at the defaults (``transceiver.headroom``, ``--max-sessions``) replaces the first
on the same ports and is offered ``factor`` x the largest N that passed, all at once (a refused
caller offers again after its Retry-After, as a client should). It must admit what it can
carry and refuse the rest: the step passes when every admitted call connected and lost < 1 %
of its frames over the window, and every refused offer got 503 + Retry-After.
The transceiver says why it refused (its ``admission_refusals`` counter, by reason).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.harness.cli import Echo
from bench.harness.pinning import pin_process
from bench.sessions_step import Processes, Snapshot, Step, finish, measure
from testbed.caller_workers import WorkerProcess, connect, hang_up, mark
from testbed.processes import TransceiverProcess, drain_stderr, metric_value

REFUSAL_REASONS = ("draining", "max_sessions", "cpu", "loop_lag", "headroom")
RETRIES = 8  # a refused caller offers again after Retry-After, as a WHIP client should


@dataclass
class Overload:
    factor: float
    capacity: int  # the largest N of the capacity steps that passed
    offered: int = 0
    admitted: int = 0  # 201 and connected
    refused_503: int = 0
    refused_with_retry_after: int = 0
    retry_after_s: list[str] = field(default_factory=list)  # the distinct values
    other_failures: list[str] = field(default_factory=list)  # neither connected nor 503
    answers_503: int = 0  # every 503 answered, retried ones included
    refusals_by_reason: dict[str, float] = field(default_factory=dict)  # the transceiver's count
    admitted_step: dict[str, Any] = field(default_factory=dict)  # a Step of the admitted calls
    ok: bool = False
    verdict: str = ""


def restart_with_admission(
    procs: Processes,
    log: Any,
    stack: contextlib.ExitStack,
    audio_format: str,
    encoder_args: Sequence[str] = (),
) -> None:
    """Stop the capacity steps' transceiver; start one with the default admission on its ports
    (the relay's allowlist names its media address) and its core, its encoder's settings the
    steps' (``encoder_args``: its --opus-* arguments)."""
    old = procs.trx
    old.stop(15.0)
    trx = TransceiverProcess(
        old.relay,
        extra_args=[
            "--drain-grace",
            "5",
            "--client-rate",
            "0",
            "--audio-format",
            audio_format,
            *encoder_args,
        ],
    )
    trx.media_port, trx.http_port, trx.metrics_port = (
        old.media_port,
        old.http_port,
        old.metrics_port,
    )
    stack.callback(trx.stop, 15.0)
    trx.start()
    assert trx.proc is not None
    drain_stderr(trx.proc, log)
    pin_process(trx.proc.pid, procs.cpus["transceiver"])
    procs.trx = trx


def run_overload(
    factor: float,
    capacity: int,
    shares: dict[WorkerProcess, list[list[int]]],
    procs: Processes,
    timing: tuple[float, float, float],
    max_loss_pct: float,
    light: bool = True,
) -> Overload:
    """Offer the calls of ``shares`` (``factor`` x ``capacity``) at once, each refused one again
    after its Retry-After (``RETRIES`` times, as a client would); measure the admitted ones over
    a window. ``timing``: (connect timeout, settle, window) in seconds; ``light``: light
    callers (``testbed.caller_workers.CallerWorker``)."""
    connect_timeout_s, settle_s, window_s = timing
    assert procs.trx.proc is not None
    result = Overload(factor, capacity, offered=sum(map(len, shares.values())))
    busy = list(shares)
    base = Snapshot.take(procs)
    replies = connect(
        shares, procs.trx.url, connect_timeout_s + 4 * RETRIES, light=light, retries=RETRIES
    )
    calls = {c["id"]: c for r in replies for c in r["calls"]}
    result.answers_503 = sum(c.get("refusals", 0) for c in calls.values())
    admitted = {k: c for k, c in calls.items() if c["connected"]}
    for c in calls.values():
        if c["connected"]:
            continue
        if c["status"] == 503:
            result.refused_503 += 1
            result.refused_with_retry_after += bool(c["retry_after"])
        else:
            result.other_failures.append(c["error"] or f"status {c['status']}")
    result.admitted = len(admitted)
    result.retry_after_s = sorted({c["retry_after"] for c in calls.values() if c["retry_after"]})
    step = Step(len(admitted))
    step.connected = len(admitted)
    if admitted:
        time.sleep(settle_s)
        pin_process(procs.trx.proc.pid, procs.cpus["transceiver"])
        a, marks_a = Snapshot.take(procs), _only(mark(busy), admitted)
        time.sleep(window_s)
        b, marks_b = Snapshot.take(procs), _only(mark(busy), admitted)
        measure(step, admitted, (marks_a, marks_b), (base, a, b), procs.cpus)
    for reply in hang_up(busy):
        for c in reply["calls"]:
            if c["id"] in admitted:
                admitted[c["id"]].update(c)
    finish(step, admitted, max_loss_pct)
    with contextlib.suppress(OSError):
        text = procs.trx.http("/metrics", port=procs.trx.metrics_port)[1]
        name = "rtcedge_transceiver_admission_refusals_total"
        result.refusals_by_reason = {r: metric_value(text, name, reason=r) for r in REFUSAL_REASONS}
    result.admitted_step = asdict(step)
    judge(result, step)
    return result


def _only(marks: list[dict[str, Any]], admitted: dict[int, Any]) -> list[dict[str, Any]]:
    """The workers' marks with the admitted calls' counters only."""
    return [
        {**m, "calls": {k: v for k, v in m["calls"].items() if int(k) in admitted}} for m in marks
    ]


def judge(result: Overload, step: Step) -> None:
    worst = step.frame_loss_pct.get("worst", math.nan)
    refused = result.offered - result.admitted
    problems = []
    if not result.admitted:
        problems.append("nothing admitted")
    elif not step.ok:
        problems.append(f"admitted calls: {step.stop_reason}")
    if result.other_failures:
        problems.append(f"{len(result.other_failures)} offers neither admitted nor refused 503")
    if result.refused_with_retry_after < result.refused_503:
        problems.append("a 503 without Retry-After")
    result.ok = not problems
    result.verdict = (
        f"offered {result.offered} ({result.factor:g} x {result.capacity}): admitted "
        f"{result.admitted}, worst frame loss {worst:.2f}%; refused {refused}, "
        f"{result.refused_503} with 503 ({result.refused_with_retry_after} with Retry-After "
        f"{'/'.join(result.retry_after_s) or '-'} s)"
        + (f"; {'; '.join(problems)}" if problems else "")
    )


def print_overload(o: dict[str, Any], echo: Echo, step_line: Any) -> None:
    echo("")
    echo(
        f"overload: {o['offered']} calls offered at once ({o['factor']:g} x the largest N that "
        "passed), to a transceiver with its default admission; a refused caller offers again "
        f"after Retry-After, up to {RETRIES} times ({o.get('answers_503', 0)} 503s in all)"
    )
    if o["admitted_step"].get("sessions"):
        echo(step_line(o["admitted_step"]))
    reasons = ", ".join(f"{r} {n:.0f}" for r, n in o["refusals_by_reason"].items() if n)
    echo(f"refusals by the transceiver's reason: {reasons or '-'}")
    for failure in sorted(set(o["other_failures"]))[:5]:
        echo(f"other failure: {failure}")
    echo(f"{'PASS' if o['ok'] else 'FAIL'} overload: {o['verdict']}")
