"""Turn benchmark: with the real example agent behind a realtime transceiver, how long a caller
waits from the end of its speech to the first audio of the answer, and where that time goes.

``rtcedge bench turn`` measures the last part of issue 23's item 7: "end-to-end with the real
example agent, the turn latency from the end of the caller's speech to the first agent audio at
the caller, split into VAD wait, recognition, synthesis and transport". ``rtcedge bench
realtime`` times the transport alone, with the agent's speech parts replaced by a clock; this
one runs them: webrtcvad, pocketsphinx and espeak-ng (``examples/voice_agent/agent.py
--log-events FILE``), whose seconds would drown the transport's milliseconds there.

Set-up, as ``bench/realtime.py``'s realtime half: a relay (1 worker) and a transceiver
``--backend realtime --backend-url ws://127.0.0.1:PORT/v1/realtime?model=bench`` (its key by
the environment), the transceiver pinned to the first allowed CPU; the agent, the relay worker,
one caller worker process (light aiortc callers, WHIP through the relay) and this process on
the other. Every caller is silent for ``LEAD_S``, says ``SENTENCE`` (espeak-ng, made at run
time, encoded to Opus once) and is silent for the rest of ``--turn-seconds``, in a loop (sent
in real time, 20 ms a packet, as a browser sends): a turn each period, answered
"you said ..." by the agent; the next sentence comes after the answer has played. Per step
(``--calls`` N, each N in turn) the N calls connect at once, so their turns end together and
queue for the agent's one recognizer: the queue is its own stage.

Each turn is split at its moments (``bench/turn_split.py``: which process reads which, all on
the machine's one wall clock): the caller's last packet with sound sent -> the agent reads it
(uplink) -> its detector declares the end (VAD wait) -> recognition starts (queue) and ends
(recognition) -> synthesis starts (hand-over) and gives its audio (synthesis) -> the first
delta is written (hand-over) -> the caller gets the first packet with sound (downlink). The
stages add up to the total; the residual is printed as the check.

Bounded: every wait has a timeout, the run a deadline (``--max-seconds``), a step ``turns x
period`` and its connect and hang-up; every process started is stopped by PID.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
from yarl import URL

from bench.backends import read_log
from bench.harness.bounds import Deadline
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.verdict import QUICK_SKIP
from bench.loopback_capture import Capture, CaptureThread, Ports
from bench.plots.turn import turn_figure
from bench.realtime_latency import DOWNLINK_STAGES, Wire, downlink_stages, session_tag, spread
from bench.sessions import (
    parse_sessions,
    plan_cpus,
    share_out,
    start_relay_and,
    wait_sessions_ended,
)
from bench.turn_split import PARTS, agent_sessions, call_turns, summarize
from testbed.caller_workers import SPEECH, connect, hang_up, start_workers, timings
from testbed.callers import RATE, speech_packets
from testbed.procfs import core_pct, descendants, process_cpu_ns
from testbed.voice_agent import VoiceAgentProcess, agent_missing, spoken

# pocketsphinx hears it well enough; it ends on a loud vowel, then espeak-ng's own silence: the
# end of the speech is one packet, told apart by its sound at both ends.
SENTENCE = "please call me back tomorrow"
LEAD_S = 1.0  # of silence before the sentence in each period: the call has settled
SAMPLE_RATE = 24000  # the transceiver's PCM toward the agent (the Realtime API's)
STEP_OVERHEAD_S = 30.0  # worst case of a step besides its turns: connect, hang up, drain
METHOD = {
    "clock": "every moment is time.time() (CLOCK_REALTIME) of the process named: one clock for "
    "all of them on one machine",
    "caller_sent": "caller: its clocked sender takes the packet that ends the speech (the last "
    "whose decoded audio peaks >= AUDIBLE_PEAK) to send it",
    "agent_heard": "agent: its WebSocket hands over the input_audio_buffer.append carrying that "
    "packet (the last append with audio_peak >= AUDIBLE_PEAK within 0.5 s)",
    "decided": "agent: the append that completed the silence was read and its detector declared "
    "the end (turn.speech_stopped)",
    "recognition_started/done": "agent: pocketsphinx began / returned, in its process",
    "synthesis_started/audio": "agent: espeak-ng began / its audio came back (all at once), in "
    "its thread",
    "first_delta": "agent: the answer's first response.output_audio.delta, about to be written",
    "caller_heard": "caller: the first packet of sound after silence after that delta, as it is "
    "handed to the caller (decoded peak >= AUDIBLE_PEAK)",
    "parts": "vad_wait, recognition, synthesis; transport = uplink + downlink; agent_waits = "
    "recognition_queue + to_synthesis + to_first_delta; residual = total - all stages",
}


@dataclass(frozen=True)
class TurnConfig:
    calls: tuple[int, ...] = (1, 3)
    turns: int = 6  # per call and step
    turn_s: float = 7.0  # the caller's period: the sentence, then silence while it is answered
    connect_timeout_s: float = 15.0
    drain_timeout_s: float = 15.0
    max_seconds: float = 300.0
    sentence: str = SENTENCE
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False


@dataclass
class TurnStep:
    """One N: its calls' turns, split and summed up, and what the machine was doing."""

    calls: int
    connected: int = 0
    errors: list[str] = field(default_factory=list)
    load_before: float = 0.0  # the 1-minute load average
    load_after: float = 0.0
    agent_cpu_pct: float = 0.0  # its threads and its recognition process (not espeak-ng's)
    unpaired_calls: int = 0  # whose agent session could not be named
    # With the loopback capture: the downlink by hop (the agent's write, the transceiver's
    # part, the relay's, the caller's), p50/p95 over the turns; or why there is none.
    downlink_stages_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    capture: dict[str, Any] = field(default_factory=dict)
    sessions_active_after: float = 0.0
    ok: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    turns: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Rig:
    """What the steps run against."""

    trx: Any
    relay: Any
    agent: VoiceAgentProcess
    agent_log: Path
    workers: list[Any]
    speech: tuple[list[bytes], int]
    cpus: dict[str, set[int]]


def run_step(n: int, cfg: TurnConfig, rig: Rig) -> TurnStep:
    """N calls at once: connect, ``turns`` periods of speech and answers, pair the callers'
    moments with the agent's, hang up; ``sessions_active`` must return to 0."""
    assert rig.trx.proc is not None and rig.agent.proc is not None
    step = TurnStep(n, load_before=os.getloadavg()[0])
    shares = share_out(n, rig.workers)
    log_from = rig.agent_log.stat().st_size
    since = time.time()
    capture = start_capture(step, rig)  # before the calls: it must see each WebSocket open
    interrupted = False
    try:
        replies = connect(
            shares, rig.trx.url, cfg.connect_timeout_s, light=True, audio=SPEECH, speech=rig.speech
        )
        calls = [c for r in replies for c in r["calls"]]
        step.connected = sum(c["connected"] for c in calls)
        step.errors = sorted({c["error"] for c in calls if c["error"]})[:5]
        if step.connected == n:
            pin_process(rig.trx.proc.pid, rig.cpus["transceiver"])  # the calls' new threads
            cpu_a, wall_a = agent_cpu_ns(rig.agent), time.monotonic()
            time.sleep(cfg.turns * cfg.turn_s + 0.5)
            cpu_b, wall_b = agent_cpu_ns(rig.agent), time.monotonic()
            step.agent_cpu_pct = core_pct(cpu_b - cpu_a, wall_b - wall_a)
            wire = stop_capture(step, capture)
            lines = read_log(rig.agent_log, log_from)
            split(step, timings(list(shares), since), lines, cfg, wire)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no goodbyes, the workers are stopped by PID
        interrupted = True
        raise
    finally:
        if capture is not None:
            capture.stop()
        if not interrupted:
            hang_up(list(shares))
    step.sessions_active_after = wait_sessions_ended(rig.trx, cfg.drain_timeout_s)
    step.load_after = os.getloadavg()[0]
    step.ok = step.connected == n and step.sessions_active_after == 0
    return step


def agent_cpu_ns(agent: VoiceAgentProcess) -> int:
    """The agent's CPU time so far: its threads and its children's (the recognition process;
    an espeak-ng that ran and ended is not counted)."""
    assert agent.proc is not None
    pids = [agent.proc.pid, *descendants(agent.proc.pid)]
    return sum(process_cpu_ns(pid)[0] for pid in pids)


def start_capture(step: TurnStep, rig: Rig) -> CaptureThread | None:
    """The loopback capture of a step; None where this process may not (said in the step)."""
    ports = Ports(rig.relay.port, rig.trx.media_port, URL(rig.agent.url).port or 0)
    capture = CaptureThread(Capture(ports))
    if not capture.start():
        step.capture = {"error": capture.error}
        return None
    return capture


def stop_capture(step: TurnStep, capture: CaptureThread | None) -> Wire | None:
    """Stop the capture; what it saw, for the downlink's hops."""
    if capture is None:
        return None
    capture.stop()
    seen = capture.capture
    sessions = {tag: (c.appends, c.deltas) for tag, c in seen.by_session().items()}
    step.capture = {"error": capture.error, "rtp_packets": seen.packets, "cpu_s": capture.cpu_s}
    return Wire(seen.rtp, sessions)


def split(
    step: TurnStep,
    replies: list[dict[str, Any]],
    lines: list[dict[str, Any]],
    cfg: TurnConfig,
    wire: Wire | None,
) -> None:
    """Each call's turns split against its agent session's log lines, then all summed up; with
    the capture, each turn's downlink by hop (``bench.realtime_latency.downlink_stages``)."""
    sessions = agent_sessions(lines)
    hops: dict[str, list[float]] = {name: [] for name in DOWNLINK_STAGES}
    for reply in replies:
        for c in reply["calls"]:
            tag = session_tag(c["first_event_id"]) or ""
            session = sessions.get(tag)
            step.unpaired_calls += session is None
            onsets = {o[0]: o for o in c["onsets"]}
            for i, t in enumerate(call_turns(c, session, cfg.turns)):
                if wire is not None and tag in wire.sessions and "total_ms" in t:
                    down = [(t["moments"]["first_delta"], t["moments"]["caller_heard"])]
                    by_hop = downlink_stages(c, down, onsets, wire, tag)["downlink_stages_ms"]
                    t["downlink_stages_ms"] = {k: v[0] for k, v in by_hop.items() if v}
                    for name, value in t["downlink_stages_ms"].items():
                        hops[name].append(value)
                step.turns.append({"call": c["id"], "turn": i + 1, **t})
    step.summary = summarize(step.turns)
    if wire is not None:
        step.downlink_stages_ms = {name: spread(values) for name, values in hops.items()}


# -- the run ---------------------------------------------------------------------------------------
def expected_step_s(n: int, cfg: TurnConfig) -> float:
    return 5.0 + 0.3 * n + cfg.turns * cfg.turn_s


def start_rig(cfg: TurnConfig, stack: contextlib.ExitStack, tmp: Path, notes: list[str]) -> Rig:
    """The speech, the agent, the relay and the transceiver, a caller worker: pinned, ready."""
    missing = agent_missing()
    if missing:
        raise click.ClickException(f"the example agent needs {', '.join(missing)}")
    lead = bytes(round(LEAD_S * RATE) * 2)
    speech = speech_packets(lead + spoken(cfg.sentence, RATE), cfg.turn_s)
    allowed = stack.enter_context(own_cpus_restored())
    cpus = plan_cpus(allowed, notes)
    os.sched_setaffinity(0, cpus["clients"])  # the agent inherits the callers' CPUs
    events = tmp / "agent-events.jsonl"
    events.touch()
    agent = VoiceAgentProcess(["--log-events", str(events)], stderr_path=tmp / "agent.log")
    stack.callback(agent.stop)
    agent.start()
    backend = ["--backend", "realtime", "--backend-url", f"{agent.url}?model=bench"]
    backend += ["--audio-rate", str(SAMPLE_RATE)]
    env = {"RTCEDGE_BACKEND_KEY": agent.key}  # never a command line
    log: collections.deque[str] = collections.deque(maxlen=200)
    max_calls = max(cfg.calls) + 5
    (trx,), relay = start_relay_and([backend], max_calls, stack, cpus, [log], notes, [env])
    workers = start_workers(1, cfg.max_seconds + 60, tmp, stack)
    pin_process(workers[0].pid, cpus["clients"])
    return Rig(trx, relay, agent, events, workers, speech, cpus)


def run(cfg: TurnConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, run a step per N, tear everything down (by PID) whatever happens."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        deadline = Deadline.after(cfg.max_seconds)
        started, load = utc_now(), os.getloadavg()
        notes: list[str] = []
        rig = start_rig(cfg, stack, Path(tmp), notes)
        packets, end = rig.speech
        echo(
            f"'{cfg.sentence}': the speech ends with packet {end + 1} of {len(packets)} "
            f"({(end + 1) * 20} ms), a turn every {cfg.turn_s:g} s; transceiver on CPU "
            f"{sorted(rig.cpus['transceiver'])}; agent, relay worker and callers on CPU "
            f"{sorted(rig.cpus['clients'])}"
        )
        progress = Progress([expected_step_s(n, cfg) for n in cfg.calls], echo, cfg.quick)
        progress.announce(f"N = {', '.join(map(str, cfg.calls))} calls, {cfg.turns} turns each")
        steps: list[TurnStep] = []
        for i, n in enumerate(cfg.calls):
            if deadline.left_s() < expected_step_s(n, cfg) + STEP_OVERHEAD_S:
                notes.append(f"stopped before N={n}: the run's deadline")
                progress.skip(len(cfg.calls) - i)
                break
            try:
                steps.append(run_step(n, cfg, rig))
            except (RuntimeError, OSError) as exc:  # report what was measured so far
                notes.append(f"step N={n} aborted: {exc}")
                progress.skip(len(cfg.calls) - i)
                break
            progress.step(step_line(asdict(steps[-1])))
            if not steps[-1].ok:
                notes.append(f"stopped at N={n}: {'; '.join(steps[-1].errors) or 'not ok'}")
                progress.skip(len(cfg.calls) - i - 1)
                break
        if rig.trx.proc is not None and rig.trx.proc.poll() is not None:
            notes.append("the transceiver exited")
        allowed = rig.cpus["transceiver"] | rig.cpus["clients"]
    result = run_header("turn", started, allowed, cfg)
    result["cpus"] = {name: sorted(group) for name, group in rig.cpus.items()}
    result["load_before"] = list(load)
    result["load_after"] = list(os.getloadavg())
    result["method"] = METHOD
    result["speech"] = {"packets": len(packets), "last_with_sound": end}
    result["steps"] = [asdict(s) for s in steps]
    result["notes"] = list(dict.fromkeys(notes))
    return result


# -- report ----------------------------------------------------------------------------------------
def _p(d: dict[str, Any], pattern: str = "{:.0f}") -> str:
    def f(v: Any) -> str:
        return "-" if v is None or v != v else pattern.format(v)

    return f"{f(d.get('p50'))}/{f(d.get('p95'))}"


COLUMNS = ("total", *PARTS, "residual")
HEADER = (
    f"{'N':>3} {'turns':>5} "
    + " ".join(f"{c.replace('_', ' '):>11}" for c in COLUMNS)
    + f" {'load':>9} {'agent':>5}\n{'':>3} {'':>5} "
    + " ".join(f"{'p50/p95 ms':>11}" for _ in COLUMNS)
    + f" {'bef/aft':>9} {'%core':>5}"
)


def step_line(d: dict[str, Any]) -> str:
    s = d["summary"] or {}
    parts = s.get("parts_ms", {})
    figures = [s.get("total_ms", {}), *(parts.get(p, {}) for p in PARTS), s.get("residual_ms", {})]
    residual = s.get("residual_ms", {})
    figures[-1] = {k: residual.get(k) for k in ("p50", "p95")}
    turns = f"{s.get('matched', 0)}/{s.get('turns', 0)}"
    load = f"{d['load_before']:.1f}/{d['load_after']:.1f}"
    return (
        f"{d['calls']:>3} {turns:>5} "
        + " ".join(f"{_p(x):>11}" for x in figures)
        + f" {load:>9} {d['agent_cpu_pct']:>5.0f}"
    )


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"turn: '{cfg['sentence']}' to the example agent (webrtcvad, pocketsphinx, espeak-ng) "
        f"through the relay and a realtime transceiver, {cfg['turns']} turns a call, one every "
        f"{cfg['turn_s']:g} s; load average {result['load_before'][0]:.2f} before, "
        f"{result['load_after'][0]:.2f} after"
    )
    echo(HEADER)
    for s in result["steps"]:
        echo(step_line(s))
    echo("")
    for s in result["steps"]:
        summary = s["summary"] or {}
        stages = summary.get("stages_ms") or {}
        if stages:
            echo(
                f"N={s['calls']} by stage, p50/p95 ms: "
                + ", ".join(f"{k.replace('_', ' ')} {_p(v)}" for k, v in stages.items())
            )
        hops = s.get("downlink_stages_ms") or {}
        if (hops.get("transceiver") or {}).get("n"):
            echo(
                f"N={s['calls']} downlink by hop (loopback capture), p50/p95 ms: "
                + ", ".join(f"{k} {_p(v, '{:.1f}')}" for k, v in hops.items())
                + f" (n={hops['transceiver']['n']:.0f})"
            )
        elif (s.get("capture") or {}).get("error"):
            echo(f"N={s['calls']} downlink by hop: none ({s['capture']['error']})")
        vad = summary.get("vad") or {}
        if (vad.get("silence_ms") or {}).get("n"):
            echo(
                f"N={s['calls']} the detector waited {_p(vad['silence_ms'])} ms of audio "
                f"(silence) and put the speech end {_p(vad['judged_end_after_sound_ms'])} ms "
                "after the caller's last sound (p50/p95)"
            )
        heard = collections.Counter(t.get("transcript") for t in s["turns"] if "total_ms" in t)
        if heard:
            echo(f"N={s['calls']} heard: " + ", ".join(f"'{k}' x{v}" for k, v in heard.items()))
        if summary.get("bursts"):
            echo(
                f"N={s['calls']}: in {summary['bursts']} turns the silence reached the detector "
                "faster than real time (a sender or reader that stalled, then caught up): their "
                "VAD wait is short"
            )
        if summary.get("unmatched") or s["unpaired_calls"] or s["errors"]:
            echo(
                f"N={s['calls']} turns missing a moment (the first missing): "
                f"{summary.get('unmatched') or 'none'}; calls without their agent session "
                f"{s['unpaired_calls']}; errors {'; '.join(s['errors']) or 'none'}"
            )
    echo(
        "total: the caller's last packet with sound sent -> the first packet with sound of the "
        "answer handed to it. vad wait: the agent read that packet -> its detector declared "
        "the end; recognition (its process), synthesis (its thread); transport: uplink (caller "
        "-> agent) + downlink (agent's first delta -> caller), through the transceiver and the "
        "relay; agent waits: the recognizer's queue and the agent's hand-overs between them; "
        "residual: total - every stage. p95 of a few turns is their largest."
    )
    if cfg.get("quick"):
        echo(f"{QUICK_SKIP}: a smoke test's figures")
    for note in result["notes"]:
        echo(f"note: {note}")


MAX_CALLS = 10  # one caller worker; the agent has one recognizer: more only queue longer


def parse_calls(calls: tuple[int, ...]) -> tuple[int, ...]:
    if max(calls) > MAX_CALLS:
        raise click.BadParameter(f"at most {MAX_CALLS} calls a step, not {max(calls)}")
    return calls


EXAMPLES = """
\b
Examples:
  rtcedge bench turn                      # 1 call, then 3 at once; 6 turns each, one per 7 s
  rtcedge bench turn --calls 1 --turns 10
  rtcedge bench turn --quick              # 1 call, 2 turns: a smoke test
\b
Needs the example agent's parts (pip install -e '.[agent]', apt-get install espeak-ng). Prints a
line per step, then the table (p50/p95 of the total and its parts, the residual, the load
average) and each step's stages. No criterion: issue 23 asks for the split, not a limit. Writes
the JSON result (every turn, its moments and stages) and its plot; exits 0 whatever the figures.
"""


@click.command("turn", epilog=EXAMPLES)
@click.option(
    "--calls",
    "calls",
    default="1,3",
    show_default=True,
    callback=lambda ctx, param, value: parse_calls(parse_sessions(ctx, param, value)),
    help="Concurrent calls per step, increasing (at most 10); their turns end together.",
)
@click.option(
    "--turns",
    type=click.IntRange(min=1, max=30),
    default=6,
    show_default=True,
    help="Turns per call and step.",
)
@click.option(
    "--turn-seconds",
    type=click.FloatRange(min=4, max=30),
    default=7.0,
    show_default=True,
    help="A caller's period: 1 s of silence, the sentence (1.5 s), then silence while the agent "
    "answers.",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=30, max=3600),
    default=300.0,
    show_default=True,
    help="Deadline of the whole run; steps that would not fit are skipped.",
)
@out_option
@click.option("--quick", is_flag=True, help="1 call, 2 turns: a smoke test, not a measurement.")
def turn_bench(
    calls: tuple[int, ...],
    turns: int,
    turn_seconds: float,
    max_seconds: float,
    out_dir: str,
    quick: bool,
) -> None:
    """A caller's turn with the example agent, end of speech to the answer's first audio:
    VAD wait, recognition, synthesis and transport."""
    if quick:
        calls, turns, max_seconds = (1,), 2, min(max_seconds, 120.0)
    cfg = TurnConfig(calls, turns, turn_seconds, max_seconds=max_seconds, out_dir=out_dir)
    cfg = dataclasses.replace(cfg, quick=quick)
    run_and_report("turn", lambda: run(cfg), print_report, cfg.out_dir, turn_figure)


if __name__ == "__main__":
    turn_bench()
