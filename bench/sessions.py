"""Session benchmark: N concurrent aiortc echo calls through the relay into one transceiver.

``rtcedge bench sessions`` checks the acceptance criterion "at least 20 echo sessions per core
under 1% frame loss" and reports, per step of N concurrent calls: time from the WHIP offer to
connected and to the first echoed audio, frame and RTP loss per call, and the transceiver's CPU
time per session.

Method. All traffic is on 127.0.0.1. One transceiver (``transceiver serve``, echo backend) is
pinned with every one of its threads to the first allowed CPU (aiortc decodes in a thread per
receiver; new threads inherit the pin, and every step re-pins them all). The callers run in a
few worker processes (``testbed/caller_workers.py``, several calls per process on one asyncio
loop), pinned to the other CPUs together with the relay (one worker) and this process. The
callers are kept cheap so that they are not the bottleneck: each sends a tone encoded to Opus
once at start-up (``OpusToneTrack``) and counts what comes back at the RTP level, decoding
inline and checking its own tone with Goertzel on a sample of frames (``EchoCounter``). By
default they are light callers (``--callers light``, ``CallerWorker``): their tone leaves on
a 20 ms clock of their own and their echo's SRTP is counted from the socket's callback, on the
transceiver's own direct paths; with stock aiortc senders the callers' core ran out first
(88 % busy at 80 opus calls, the transceiver's at 38 %).

A step: start N calls at once (an even share per worker), wait until all are connected, let the
echo settle, then measure a window (``bench/sessions_step.py``): per call, audible (echoed)
frames received against the window / 20 ms (frame loss), sequence-number gaps (RTP loss) and the
echo lag (frames sent minus frames heard back); for the transceiver, CPU time summed over all
its threads (/proc/<pid>/task/*/schedstat) -> CPU per session. Then every call hangs up (WHIP
DELETE) and the transceiver's ``sessions_active`` must return to 0 before the next step.

A step passes when every call connected, heard its own echo and nobody else's, lost < 1% of its
frames, and the transceiver stayed under 95% of its core: a saturated transceiver may still
pass every frame, only later and later, so it is a limit, not a capacity. The series stops at
the first step that does not pass. The machine is shared: busy time on our CPUs that none of our
processes used is reported ("others"), and a step that failed while it was >= 10% of a core is
run once more (``--retries``); both attempts are kept.

Bounded: every wait has a timeout, the whole run a deadline (``--max-seconds``), the workers a
deadline of their own; every process started is stopped by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from bench.codec_ref import measure_on
from bench.encoder_variants import BASE_AGAIN, Variant, compare, parse_variant, print_comparison
from bench.harness.bounds import Deadline, poll_until
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import cpus_of, own_cpus_restored, pin_process, thread_affinities
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.verdict import verdict
from bench.plots.sessions import sessions_figure
from bench.sessions_overload import print_overload, restart_with_admission, run_overload
from bench.sessions_step import (
    TRANSCEIVER_SATURATED_PCT,
    Processes,
    Snapshot,
    Step,
    disturbed,
    finish,
    measure,
)
from common.config import ConfigError
from testbed.caller_workers import (
    BEEPS,
    SPEECH,
    TONE,
    WorkerProcess,
    callers_option,
    connect,
    hang_up,
    mark,
    start_workers,
)
from testbed.callers import RATE, beep_packets, speech_packets
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess, drain_stderr
from testbed.procfs import core_pct
from testbed.voice_agent import spoken
from transceiver import codec_options
from transceiver.call.libopus import DEFAULTS, EncoderSettings, version

MAX_LOSS_PCT = 1.0  # the acceptance criteria's frame loss bound
MAX_ECHO_DELAY_P95_MS = 60.0
MAX_CODEC_RATIO = 2.5  # pcm16: transceiver CPU per call / codec-only CPU per call
TARGET_OPUS_SESSIONS_PER_CORE = 300  # opus passthrough, derived from CPU per call
PCM16, OPUS = "pcm16", "opus"
FORMAT_TEXT = {
    PCM16: "the echo backend gets decoded PCM16 (libopus decode + encode per call)",
    OPUS: "the echo backend gets the caller's Opus packets and sends them back (no codec work)",
}
CODEC_REF_MAX_CALLS = 60  # decoders + encoders used in turn for the codec-only reference
CODEC_REF_AUDIO_S = 2.0  # per call
FIRST_TONE_HZ = 300  # call i sends FIRST_TONE_HZ + i * TONE_STEP_HZ (whole Hz: OpusToneTrack)
TONE_STEP_HZ = 60  # > one Goertzel bin (50 Hz over a 20 ms frame): neighbours stay apart
STEP_OVERHEAD_S = 40.0  # worst case of a step besides its window: connect, settle, hang up
# --caller-audio speech: this sentence (espeak-ng) then silence, in a loop: ~3 s of speech and
# 1.5 s of silence, in which DTX (--opus-dtx) sends nothing.
SPEECH_TEXT = "please call me back tomorrow, I am in a meeting until five"
SPEECH_SILENCE_S = 1.5
CALLER_AUDIO = (TONE, BEEPS, SPEECH)
CALLER_AUDIO_TEXT = {
    TONE: "a tone (two levels, never silent)",
    BEEPS: "beeps (100 ms of tone a second; frame loss counts the beeps only: not judged)",
    SPEECH: f"speech ('{SPEECH_TEXT}', then {SPEECH_SILENCE_S:g} s of silence; frame loss "
    "counts audible frames only: not judged)",
}
METHOD = {
    "frame_loss": "1 - audible echo frames received / (window / 20 ms), per call; "
    "window edges make it +-0.2% over 10 s, so it can be slightly negative",
    "rtp_loss": "sequence-number gaps of the echo stream in the window (RFC 3550 A.3), "
    "counted by the caller (its receiver is replaced by testbed.callers.EchoCounter)",
    "cpu_per_session": "transceiver CPU time over the window (all threads, "
    "/proc/<pid>/task/*/schedstat) / N, idle cost included",
    "callers": "light (default) or stock aiortc (result's light_callers); "
    "pre-encoded Opus tone out (two levels in a fixed pattern over its 1 s loop); "
    "echo recognised byte for byte when passed through, else decoded inline and the tone "
    "checked with Goertzel on the first audible frames and then on 1 steady frame in 50",
    "echo_delay": "arrival - due send time of the loop frame each echo frame matches (by its "
    "bytes, or by the level pattern's best whole-frame lag), median per call over the window",
}


@dataclass(frozen=True)
class BenchConfig:
    sessions: tuple[int, ...] = (10, 20, 40, 60, 80)
    window_s: float = 10.0
    settle_s: float = 2.0  # between "all connected" and the window: first echoes arrive
    idle_s: float = 2.0  # the transceiver's CPU with no session, before the first step
    calls_per_worker: int = 10
    retries: int = 1  # of a step disturbed by others' work on the machine (``disturbed``)
    connect_timeout_s: float = 15.0
    drain_timeout_s: float = 15.0  # for sessions_active to return to 0 after a step
    max_seconds: float = 600.0
    max_loss_pct: float = MAX_LOSS_PCT
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False  # a smoke test: the criterion is not judged
    overload: float = 0.0  # then offer this x the largest N that passed (bench/sessions_overload)
    audio_formats: tuple[str, ...] = (PCM16, OPUS)  # the echo backend's, a series each
    light_callers: bool = True  # testbed.caller_workers.CallerWorker: light or stock aiortc
    # The transceiver's outbound encoder (its --opus-* options), and the codec-only reference's.
    encoder: EncoderSettings = DEFAULTS
    # Then a pcm16 series per variant, and the base's once more (bench/encoder_variants.py).
    variants: tuple[Variant, ...] = ()
    caller_audio: str = TONE  # what the callers send: CALLER_AUDIO (``caller_packets``)

    @property
    def workers(self) -> int:
        return max(1, math.ceil(max(self.sessions) / self.calls_per_worker))


# -- one step: N calls -----------------------------------------------------------------------------
def run_step(n: int, audio_format: str, cfg: BenchConfig, procs: Processes) -> Step:
    """N calls at once: connect, measure a window, hang up; then the verdict, and the
    transceiver's sessions_active must return to 0."""
    assert procs.trx.proc is not None
    step = Step(n, audio_format)
    pin_process(procs.trx.proc.pid, procs.cpus["transceiver"])
    shares = share_out(n, procs.workers)
    base = Snapshot.take(procs)  # the frame counters before the calls
    interrupted = False
    try:
        calls = connect_calls(
            step,
            shares,
            procs.trx.url,
            cfg.connect_timeout_s,
            cfg.light_callers,
            cfg.caller_audio,
            caller_speech() if cfg.caller_audio == SPEECH else None,
        )
        if not step.failed:
            measure_window(step, calls, base, list(shares), cfg, procs)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no goodbyes, the workers are stopped by PID
        interrupted = True
        raise
    finally:
        if not interrupted:
            hung = hang_up(list(shares))
    for reply in hung:  # the final word on first echoes and tone checks
        for c in reply["calls"]:
            calls[c["id"]].update(c)
    # Frame loss counts audible frames: a bound for the tone only (beeps and speech are silent
    # most of the time, and so is their echo).
    finish(step, calls, cfg.max_loss_pct if cfg.caller_audio == TONE else math.inf)
    step.sessions_active_after = wait_sessions_ended(procs.trx, cfg.drain_timeout_s)
    if step.sessions_active_after != 0 and not step.stop_reason:
        step.stop_reason = f"{step.sessions_active_after:.0f} sessions still active after hang-up"
        step.ok = False
    return step


def share_out(n: int, workers: list[WorkerProcess]) -> dict[WorkerProcess, list[list[int]]]:
    """Calls 0..n-1, each with a tone of its own, dealt round robin: [id, Hz] per call, for the
    workers that get any."""
    shares: dict[WorkerProcess, list[list[int]]] = {w: [] for w in workers}
    for i in range(n):
        shares[workers[i % len(workers)]].append([i, FIRST_TONE_HZ + TONE_STEP_HZ * i])
    return {w: share for w, share in shares.items() if share}


def connect_calls(
    step: Step,
    shares: dict[WorkerProcess, list[list[int]]],
    url: str,
    timeout_s: float,
    light: bool,
    audio: str = TONE,
    speech: tuple[list[bytes], int] | None = None,
) -> dict[int, dict[str, Any]]:
    """Every call connected at once (``light``: light callers; ``audio``: what they send,
    ``testbed.caller_workers.EchoCall``, ``speech`` its packets for speech); each call's
    summary by id."""
    connected = connect(shares, url, timeout_s, light=light, audio=audio, speech=speech)
    calls = {c["id"]: c for reply in connected for c in reply["calls"]}
    step.connected = sum(c["connected"] for c in calls.values())
    step.failed = step.sessions - step.connected
    step.errors = sorted({c["error"] for c in calls.values() if c["error"]})[:5]
    if step.failed:
        step.stop_reason = f"{step.failed} of {step.sessions} calls did not connect"
    return calls


def measure_window(
    step: Step,
    calls: dict[int, dict[str, Any]],
    base: Snapshot,
    busy: list[WorkerProcess],
    cfg: BenchConfig,
    procs: Processes,
) -> None:
    """Let the echo settle, then measure a window bounded by a snapshot of the processes and a
    mark of the callers at each end."""
    assert procs.trx.proc is not None
    time.sleep(cfg.settle_s)
    pin_process(procs.trx.proc.pid, procs.cpus["transceiver"])  # threads of the new calls
    a, marks_a = Snapshot.take(procs), mark(busy)
    time.sleep(cfg.window_s)
    b, marks_b = Snapshot.take(procs), mark(busy)
    measure(step, calls, (marks_a, marks_b), (base, a, b), procs.cpus)


def wait_sessions_ended(trx: TransceiverProcess, timeout_s: float) -> float:
    """``sessions_active`` after it returned to 0 or after ``timeout_s`` (NaN: not readable)."""

    def sessions_active() -> float:
        try:
            return trx.metric("rtcedge_transceiver_sessions_active")
        except OSError:
            return math.nan

    return poll_until(sessions_active, lambda active: active == 0, timeout_s, 0.1)


# -- the series: N increasing ----------------------------------------------------------------------
def expected_step_s(n: int, cfg: BenchConfig) -> float:
    """A step's a-priori duration for the progress estimate (a rough guess for connecting N
    calls and hanging up, plus the settle time and the window); the estimate then follows the
    pace of the steps already done."""
    return 4.0 + 0.3 * n + cfg.settle_s + cfg.window_s


def run_series(
    cfg: BenchConfig,
    audio_format: str,
    procs: Processes,
    deadline: Deadline,
    notes: list[str],
    progress: Progress,
) -> list[Step]:
    """The steps in increasing N, up to the first that does not pass or the run's deadline."""
    assert procs.trx.proc is not None
    steps: list[Step] = []
    for i, n in enumerate(cfg.sessions):
        attempts, go_on = run_attempts(n, audio_format, cfg, procs, deadline, notes, progress)
        steps += attempts
        if not go_on:
            progress.skip(len(cfg.sessions) - i - 1)
            break
        affinities = thread_affinities(procs.trx.proc.pid)
        if affinities != {frozenset(procs.cpus["transceiver"])}:
            notes.append(f"transceiver threads had affinities {sorted(map(sorted, affinities))}")
    return steps


def run_attempts(
    n: int,
    audio_format: str,
    cfg: BenchConfig,
    procs: Processes,
    deadline: Deadline,
    notes: list[str],
    progress: Progress,
) -> tuple[list[Step], bool]:
    """Step N, again while it failed disturbed by others' work (``cfg.retries`` times at most);
    returns the attempts and whether the series goes on."""
    attempts: list[Step] = []
    for attempt in range(1, cfg.retries + 2):
        if deadline.left_s() < cfg.window_s + cfg.settle_s + STEP_OVERHEAD_S:
            notes.append(f"stopped before N={n}: the run's deadline ({cfg.max_seconds:.0f} s)")
            return attempts, False
        try:
            step = run_step(n, audio_format, cfg, procs)
        except (RuntimeError, OSError) as exc:  # report what was measured so far
            notes.append(f"step N={n} aborted: {exc}")
            progress.echo(f"stopping: step N={n} aborted: {exc}")
            return attempts, False
        step.attempt = attempt
        attempts.append(step)
        progress.step(step_line(step, judged=not cfg.quick))
        if step.ok:
            return attempts, True
        if attempt <= cfg.retries and disturbed(step):
            progress.insert(expected_step_s(n, cfg))
            progress.echo(
                f"repeating N={n}: others' work took "
                f"{step.others_on_transceiver_core_pct:.0f}% of the transceiver's core and "
                f"{step.others_on_callers_cores_pct:.0f}% of the callers' (a shared machine)"
            )
            continue
        progress.echo(f"stopping: {step.stop_reason}")
        return attempts, False
    return attempts, False  # not reached: the last attempt is never repeated


# -- the run ---------------------------------------------------------------------------------------
def plan_cpus(allowed: set[int], notes: list[str]) -> dict[str, set[int]]:
    """The transceiver on the first allowed CPU, the callers (and this process) on the others."""
    trx_cpus = {min(allowed)}
    client_cpus = (allowed - trx_cpus) or set(allowed)
    if client_cpus & trx_cpus:
        notes.append(
            "only one CPU: the callers share the transceiver's core, so its CPU per session is "
            "measured but the loss figures mean little"
        )
    return {"transceiver": trx_cpus, "clients": client_cpus}


def start_services(
    cfg: BenchConfig,
    audio_format: str,
    stack: contextlib.ExitStack,
    cpus: dict[str, set[int]],
    trx_log: collections.deque[str],
    notes: list[str],
    encoder: EncoderSettings = DEFAULTS,
) -> tuple[TransceiverProcess, RelayProcess]:
    """The relay and one echo transceiver of ``audio_format`` whose encoder runs with
    ``encoder``, every setting said on its command line (``start_relay_and``)."""
    backend = ["--audio-format", audio_format, *codec_options.arguments(encoder)]
    max_sessions = max(cfg.sessions) + 10
    (trx,), relay = start_relay_and([backend], max_sessions, stack, cpus, [trx_log], notes)
    return trx, relay


def start_relay_and(
    backends: list[list[str]],
    max_sessions: int,
    stack: contextlib.ExitStack,
    cpus: dict[str, set[int]],
    logs: list[collections.deque[str]],
    notes: list[str],
    envs: list[dict[str, str]] | None = None,
    relay_with_transceiver: bool = False,
) -> tuple[list[TransceiverProcess], RelayProcess]:
    """A transceiver per entry of ``backends`` (its backend's arguments, and its entry of
    ``envs``: variables such as a key, never on a command line; ids 0, 1...: the relay routes
    each call to the one its answer names), started while this process runs on the
    transceiver's CPU only (the child inherits the pin, and so do the threads it starts later);
    then the relay, after this process moved to the callers' CPUs (the relay pins its worker to
    the first of them), or with ``relay_with_transceiver`` before, on the transceiver's CPU
    (``bench/peer.py``: the server's core holds both, as Janus's holds Janus). Each
    transceiver's stderr flows into its entry of ``logs``. Adds cpus["relay"]."""
    relay = RelayProcess({}, workers=1, pin=True)
    transceivers = []
    for tid, backend in enumerate(backends):
        trx = TransceiverProcess(
            relay,
            tid=tid,
            extra_args=["--drain-grace", "5", "--max-sessions", str(max_sessions), *backend],
            extra_env=(envs or [{}] * len(backends))[tid],
        )
        # The steps measure the transceiver, not its admission policy (the overload step does).
        trx.extra_args += NO_LOAD_GATE
        trx.extra_args += ["--client-rate", "0"]  # every call comes from one loopback address
        relay.transceivers[tid] = trx.media_address
        transceivers.append(trx)
    os.sched_setaffinity(0, cpus["transceiver"])
    for trx, log in zip(transceivers, logs, strict=True):
        stack.callback(trx.stop, 15.0)
        trx.start()
        assert trx.proc is not None
        drain_stderr(trx.proc, log)
    if relay_with_transceiver:
        start_relay(relay, stack)
    os.sched_setaffinity(0, cpus["clients"])
    for trx in transceivers:
        assert trx.proc is not None
        pin_process(trx.proc.pid, cpus["transceiver"])
    if not relay_with_transceiver:
        start_relay(relay, stack)
    cpus["relay"] = cpus_of(relay.worker_pids())
    if cpus["relay"] & cpus["transceiver"]:
        notes.append(f"the relay worker shares the transceiver's CPU {sorted(cpus['relay'])}")
    else:
        notes.append(
            f"the relay worker runs on the callers' CPU {sorted(cpus['relay'])}, not the "
            "transceiver's: its cost is reported apart (relay CPU %)"
        )
    return transceivers, relay


def start_relay(relay: RelayProcess, stack: contextlib.ExitStack) -> None:
    stack.callback(relay.stop)
    relay.start()
    assert relay.proc is not None
    drain_stderr(relay.proc, collections.deque(maxlen=200))


def measure_idle(procs: Processes, idle_s: float) -> tuple[float, float]:
    """The transceiver's own cost with no session (HTTP server, watchdog, timers), % of a core,
    and its resident memory then, MB."""
    a = Snapshot.take(procs)
    time.sleep(idle_s)
    b = Snapshot.take(procs)
    return core_pct(b.transceiver_ns - a.transceiver_ns, b.t - a.t), b.transceiver_rss / 2**20


def measure_codec(
    cfg: BenchConfig, cpus: set[int], echo: Echo, encoder: EncoderSettings, label: str = ""
) -> dict[str, Any]:
    """The codec-only reference on the transceiver's core (``bench/codec_ref.py``), encoding
    with the settings of the transceiver it is the reference of."""
    calls = min(max(cfg.sessions), CODEC_REF_MAX_CALLS)
    audio = caller_packets(cfg.caller_audio, calls)
    cost = measure_on(cpus, calls, 0.5 if cfg.quick else CODEC_REF_AUDIO_S, encoder, audio)
    echo(
        f"codec only{f' [{label}]' if label else ''} (libopus decode + encode, {calls} calls in "
        f"turn, CPU {sorted(cpus)}): {cost.total_pct:.3f}% of a core per call (decode "
        f"{cost.decode_pct:.3f}, encode {cost.encode_pct:.3f})"
    )
    return asdict(cost)


@functools.cache
def caller_speech() -> tuple[list[bytes], int]:
    """``--caller-audio speech``: SPEECH_TEXT then SPEECH_SILENCE_S of silence, as the Opus
    packets each caller loops, and the index of the last with sound."""
    pcm = spoken(SPEECH_TEXT, RATE)
    return speech_packets(pcm, len(pcm) / 2 / RATE + SPEECH_SILENCE_S)


def caller_packets(audio: str, calls: int) -> list[list[bytes]] | None:
    """What the codec-only reference decodes for ``calls`` calls: the callers' own audio (None:
    their tones, ``codec_ref``'s default); each call's speech starts at a frame of its own."""
    if audio == BEEPS:
        return [beep_packets(FIRST_TONE_HZ + TONE_STEP_HZ * i) for i in range(calls)]
    if audio == SPEECH:
        packets = caller_speech()[0]
        shifts = [i * 7 % len(packets) for i in range(calls)]
        return [packets[k:] + packets[:k] for k in shifts]
    return None


def measure_codecs(
    cfg: BenchConfig, cpus: set[int], echo: Echo, when: str, codec: dict[str, Any]
) -> None:
    """``measure_codec`` for the base settings (into ``codec[when]``) and for each variant's
    (into ``codec["variants"][label][when]``)."""
    codec[when] = measure_codec(cfg, cpus, echo, cfg.encoder)
    for v in cfg.variants:
        by_label = codec.setdefault("variants", {}).setdefault(v.label, {})
        by_label[when] = measure_codec(cfg, cpus, echo, v.encoder, v.label)


def run_format(
    audio_format: str,
    cfg: BenchConfig,
    workers: list[WorkerProcess],
    cpus: dict[str, set[int]],
    deadline: Deadline,
    notes: list[str],
    progress: Progress,
    encoder: EncoderSettings | None = None,
) -> dict[str, Any]:
    """A transceiver and a relay of their own, the series of steps, the overload step: one
    audio format's figures (``encoder``: the transceiver's settings, else the run's)."""
    echo = progress.echo
    encoder = encoder or cfg.encoder
    with contextlib.ExitStack() as stack:
        trx_log: collections.deque[str] = collections.deque(maxlen=200)
        trx, relay = start_services(cfg, audio_format, stack, cpus, trx_log, notes, encoder)
        assert trx.proc is not None
        procs = Processes(trx, relay, relay.worker_pids(), workers, cpus)
        echo(
            f"[{audio_format}] transceiver pid {trx.proc.pid} on CPU "
            f"{sorted(cpus['transceiver'])}; relay worker {procs.relay_pids} on CPU "
            f"{sorted(cpus['relay'])}; {len(workers)} caller workers (up to "
            f"{cfg.calls_per_worker} calls each) and this process on CPU {sorted(cpus['clients'])}"
        )
        idle_pct, idle_rss_mb = measure_idle(procs, cfg.idle_s)
        echo(f"[{audio_format}] transceiver idle: {idle_pct:.2f}% of a core, {idle_rss_mb:.0f} MB")
        steps = run_series(cfg, audio_format, procs, deadline, notes, progress)
        if trx.proc.poll() is not None:
            notes.append(f"the transceiver exited: {' | '.join(list(trx_log)[-5:])}")
        overload = overload_step(cfg, steps, procs, deadline, trx_log, stack, notes, echo, encoder)
    out: dict[str, Any] = {
        "transceiver_idle_cpu_pct": idle_pct,
        "transceiver_idle_rss_mb": idle_rss_mb,
        "steps": [asdict(s) for s in steps],
        "encoder": encoder.as_dict(),  # the transceiver's (pcm16: what its calls encode with)
    }
    if overload is not None:
        out["overload"] = overload
    return out


def run(cfg: BenchConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, run the steps of each audio format (then of each encoder variant),
    tear everything down (by PID) whatever happens. The codec-only reference is measured before
    and after, on the transceiver's core while no transceiver runs, with the encoder settings
    of the transceiver it is the reference of."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        deadline = Deadline.after(cfg.max_seconds)
        started = utc_now()
        notes: list[str] = []
        allowed = stack.enter_context(own_cpus_restored())
        cpus = plan_cpus(allowed, notes)
        echo(f"opus encoder of the pcm16 calls: {cfg.encoder.describe()} ({version()})")
        codec: dict[str, Any] = {}
        measure_codecs(cfg, cpus["transceiver"], echo, "before", codec)
        os.sched_setaffinity(0, cpus["clients"])
        workers = start_workers(cfg.workers, cfg.max_seconds + 60, Path(tmp), stack)
        for w in workers:
            pin_process(w.pid, cpus["clients"])
        series = [*cfg.audio_formats, *(v.label for v in variant_series(cfg))]
        progress = Progress(
            [expected_step_s(n, cfg) for _ in series for n in cfg.sessions], echo, cfg.quick
        )
        progress.announce(
            f"steps of N = {', '.join(map(str, cfg.sessions))} concurrent calls for "
            f"{' then '.join(series)}"
        )
        formats = {
            fmt: run_format(fmt, cfg, workers, cpus, deadline, notes, progress)
            for fmt in cfg.audio_formats
        }
        variants = {
            v.label: run_format(PCM16, cfg, workers, cpus, deadline, notes, progress, v.encoder)
            for v in variant_series(cfg)
        }
        measure_codecs(cfg, cpus["transceiver"], echo, "after", codec)
    codec["per_call_pct"] = (codec["before"]["total_pct"] + codec["after"]["total_pct"]) / 2
    for by_label in codec.get("variants", {}).values():
        by_label["per_call_pct"] = (
            by_label["before"]["total_pct"] + by_label["after"]["total_pct"]
        ) / 2
    result = run_header("sessions", started, allowed, cfg)
    result["cpus"] = {name: sorted(group) for name, group in cpus.items()}
    result["method"] = METHOD
    result["encoder"] = {"settings": cfg.encoder.as_dict(), "said": cfg.encoder.describe()}
    result["encoder"]["libopus"] = version()
    result["codec"] = codec
    result["formats"] = formats
    if variants:
        result["variants"] = variants
    result["steps"] = [s for f in formats.values() for s in f["steps"]]
    result["notes"] = notes
    result["summary"] = summarize(result, cfg)
    return result


def variant_series(cfg: BenchConfig) -> list[Variant]:
    """The pcm16 series after the formats': each variant, then the base once more."""
    if not cfg.variants:
        return []
    return [*cfg.variants, Variant(BASE_AGAIN, cfg.encoder)]


def overload_step(
    cfg: BenchConfig,
    steps: list[Step],
    procs: Processes,
    deadline: Deadline,
    trx_log: collections.deque[str],
    stack: contextlib.ExitStack,
    notes: list[str],
    echo: Echo,
    encoder: EncoderSettings = DEFAULTS,
) -> dict[str, Any] | None:
    """``--overload``: ``cfg.overload`` x the largest N that passed, to a transceiver with its
    default admission and the steps' ``encoder`` (``bench/sessions_overload.py``)."""
    if not cfg.overload:
        return None
    capacity = max((s.sessions for s in steps if s.ok), default=0)
    if not capacity:
        notes.append("overload step skipped: no capacity step passed")
        return None
    if deadline.left_s() < cfg.window_s + cfg.settle_s + 2 * STEP_OVERHEAD_S:
        notes.append(f"overload step skipped: the run's deadline ({cfg.max_seconds:.0f} s)")
        return None
    audio_format = steps[0].audio_format
    restart_with_admission(procs, trx_log, stack, audio_format, codec_options.arguments(encoder))
    shares = share_out(math.ceil(cfg.overload * capacity), procs.workers)
    echo(f"[{audio_format}] overload: offering {sum(map(len, shares.values()))} calls at once")
    timing = (cfg.connect_timeout_s, cfg.settle_s, cfg.window_s)
    result = asdict(
        run_overload(
            cfg.overload, capacity, shares, procs, timing, cfg.max_loss_pct, cfg.light_callers
        )
    )
    echo(f"[{audio_format}] overload: {result['verdict']}")
    return result


def rss_slope_mb(idle_rss_mb: float, steps: list[dict[str, Any]]) -> float | None:
    """Memory per call: least-squares slope of the transceiver's RSS over N (idle as N = 0)."""
    points = [(0.0, idle_rss_mb)] + [
        (float(s["sessions"]), s["transceiver_rss_mb"])
        for s in steps
        if s["connected"] == s["sessions"] and math.isfinite(s["transceiver_rss_mb"])
    ]
    if len({n for n, _ in points}) < 2:
        return None
    return statistics.linear_regression([n for n, _ in points], [m for _, m in points]).slope


def cpu_slope_pct(steps: list[dict[str, Any]]) -> float | None:
    """What one more call adds to the transceiver's CPU, % of a core: the least-squares slope of
    its CPU over N, steps that passed. Lower than CPU per call at the largest N, whose average
    carries the load's fixed share (wake-ups, the clock's ticks): for planning, not the
    criterion."""
    points = [(float(s["sessions"]), s["transceiver_cpu_pct"]) for s in steps if s["ok"]]
    if len({n for n, _ in points}) < 2:
        return None
    return statistics.linear_regression([n for n, _ in points], [c for _, c in points]).slope


def summarize_format(
    audio_format: str, figures: dict[str, Any], codec_pct: float, cfg: BenchConfig
) -> dict[str, Any]:
    """One format's headline figures and its acceptance criterion."""
    steps = figures["steps"]
    good = [s for s in steps if s["ok"]]
    best = max(good, key=lambda s: s["sessions"]) if good else None
    idle = figures["transceiver_idle_cpu_pct"]
    out: dict[str, Any] = {
        "largest_n_under_loss": best["sessions"] if best else 0,
        "sessions_per_core_derived": None,
        "cpu_per_session_pct": None,
        "marginal_cpu_per_session_pct": None,
        "codec_ratio": None,
        "echo_lag_p95_ms": None,
        "echo_delay_p95_ms": None,
        "connect_ms": best["connect_ms"] if best else {},
        "first_echo_ms": best["first_echo_ms"] if best else {},
        "rss_mb_per_call": rss_slope_mb(figures["transceiver_idle_rss_mb"], steps),
        "cpu_slope_per_session_pct": cpu_slope_pct(steps),
    }
    if best is not None and best["cpu_per_session_pct"] > 0:
        out["cpu_per_session_pct"] = best["cpu_per_session_pct"]
        out["sessions_per_core_derived"] = 100.0 / best["cpu_per_session_pct"]
        out["marginal_cpu_per_session_pct"] = (best["transceiver_cpu_pct"] - idle) / best[
            "sessions"
        ]
        out["codec_ratio"] = best["cpu_per_session_pct"] / codec_pct
        out["echo_lag_p95_ms"] = best["echo_lag_ms"].get("p95")
        out["echo_delay_p95_ms"] = best.get("echo_delay_ms", {}).get("p95")
    out["criterion"] = criterion(audio_format, steps, best, out, cfg.max_loss_pct, cfg.quick)
    return out


def summarize(result: dict[str, Any], cfg: BenchConfig) -> dict[str, Any]:
    codec_pct = result["codec"]["per_call_pct"]
    out: dict[str, Any] = {
        "codec_cpu_per_call_pct": codec_pct,
        "by_format": {
            fmt: summarize_format(fmt, figures, codec_pct, cfg)
            for fmt, figures in result["formats"].items()
        },
    }
    variants = result.get("variants")
    if variants and PCM16 in result["formats"]:
        codec = {"base": codec_pct} | {
            label: figures["per_call_pct"] for label, figures in result["codec"]["variants"].items()
        }
        bases = [result["formats"][PCM16]["steps"], variants[BASE_AGAIN]["steps"]]
        others = {label: v["steps"] for label, v in variants.items() if label != BASE_AGAIN}
        out["variants"] = compare(bases, others, codec)
    return out


def criterion(
    audio_format: str,
    steps: list[dict[str, Any]],
    best: dict[str, Any] | None,
    figures: dict[str, Any],
    max_loss_pct: float,
    quick: bool = False,
) -> dict[str, Any]:
    """pcm16: CPU per call <= 2.5 x the codec-only reference; opus: >= 300 sessions per core
    derived from CPU per call. Both at the largest N that passed (every call under 1% frame
    loss, echo lag p95 <= 60 ms there)."""
    if audio_format == PCM16:
        name = (
            f"PCM echo: transceiver CPU per call <= {MAX_CODEC_RATIO:g} x the codec-only "
            f"reference, every call < {max_loss_pct:g}% frame loss, echo delay p95 <= "
            f"{MAX_ECHO_DELAY_P95_MS:.0f} ms"
        )
    else:
        name = (
            f"Opus passthrough echo: >= {TARGET_OPUS_SESSIONS_PER_CORE} sessions per core "
            f"derived from CPU per call, every call < {max_loss_pct:g}% frame loss, echo delay "
            f"p95 <= {MAX_ECHO_DELAY_P95_MS:.0f} ms"
        )
    last = steps[-1] if steps else None
    ended = (
        "every step passed"
        if last is not None and last["ok"]
        else f"the series ended at N={last['sessions']}: {last['stop_reason']}"
        if last is not None
        else "no step ran"
    )
    if best is None or figures["cpu_per_session_pct"] is None:
        detail = f"no step passed; {ended}"
        if quick:  # not a failure: a smoke test's few calls on a busy machine often lose frames
            detail = f"no step met its conditions (a quick run is not judged); {ended}"
        return {"name": name, "basis": "measured", "pass": False, "detail": detail}
    lag = figures["echo_delay_p95_ms"]  # the echo's measured delay (the lag counts losses too)
    lag_ok = lag is not None and lag <= MAX_ECHO_DELAY_P95_MS
    ratio, derived = figures["codec_ratio"], figures["sessions_per_core_derived"]
    if audio_format == PCM16:
        ok = ratio <= MAX_CODEC_RATIO and lag_ok
        headline = f"CPU per call {figures['cpu_per_session_pct']:.2f}% = {ratio:.2f} x codec"
    else:
        ok = derived >= TARGET_OPUS_SESSIONS_PER_CORE and lag_ok
        headline = f"CPU per call {figures['cpu_per_session_pct']:.3f}% -> {derived:.0f} per core"
    return {
        "name": name,
        "basis": "derived",
        "pass": ok,
        "detail": f"{headline} at N={best['sessions']} (worst call "
        f"{best['frame_loss_pct']['worst']:.2f}% loss, echo delay p95 {_f(lag)} ms, "
        f"{derived:.0f} sessions per core derived); {ended}",
    }


# -- report ----------------------------------------------------------------------------------------
def _f(value: Any, pattern: str = "{:.0f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return pattern.format(value)


def step_line(s: Step | dict[str, Any], judged: bool = True) -> str:
    """One step as a table row; ``judged=False`` (a quick run: a 2 s window, where one frame is
    1 %) shows no verdict."""
    d = asdict(s) if isinstance(s, Step) else s
    loss, rtp = d["frame_loss_pct"], d["rtp_loss_pct"]
    n = f"{d['sessions']}" + ("" if d["attempt"] == 1 else f"#{d['attempt']}")
    return (
        f"{n:>5} {d['connected']:>4} "
        f"{_f(d['connect_ms'].get('p50')):>5}/{_f(d['connect_ms'].get('p95')):<5} "
        f"{_f(d['first_echo_ms'].get('p50')):>5}/{_f(d['first_echo_ms'].get('p95')):<5} "
        f"{_f(loss.get('median'), '{:.2f}'):>6}/{_f(loss.get('worst'), '{:.2f}'):<6} "
        f"{_f(rtp.get('worst'), '{:.2f}'):>6} "
        f"{_f(d.get('echo_delay_ms', {}).get('p95')):>5}/{_f(d['echo_lag_ms'].get('worst')):<5}"
        f"{_f(d['transceiver_cpu_pct'], '{:.1f}'):>6} {_f(d['cpu_per_session_pct'], '{:.2f}'):>6} "
        f"{_f(d.get('transceiver_rss_mb')):>5} "
        f"{_f(d['clients_cpu_pct'], '{:.0f}'):>7} {_f(d['relay_cpu_pct'], '{:.0f}'):>5} "
        f"{_f(d['others_on_transceiver_core_pct'], '{:.0f}'):>5}/"
        f"{_f(d['others_on_callers_cores_pct'], '{:.0f}'):<5} "
        + (("ok" if d["ok"] else "FAIL") if judged else "(quick run: not judged)")
        + (f" ({'busy' if d['ok'] else 'limit'}: {d['limit']})" if d["limit"] and judged else "")
    )


HEADER = (
    f"{'N':>5} {'conn':>4} {'connect ms':^12}{'1st echo ms':^12}{'frame loss %':^14}"
    f"{'RTP %':>6} {'echo ms':^11} {'trx':>6} {'CPU/':>6} {'RSS':>5} {'callers':>7} "
    f"{'relay':>5} {'others':^11}\n"
    f"{'':>5} {'':>4} {'p50/p95':^12}{'p50/p95':^12}{'med/worst':^14}"
    f"{'worst':>6} {'dly95/lag':^11} {'%core':>6} {'sess.':>6} {'MB':>5} {'%core':>7} "
    f"{'%core':>5} {'c0/c1 %core':^11}"
)


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    summary = result["summary"]
    codec = result["codec"]
    echo("")
    echo(
        f"sessions: echo calls through the relay into one transceiver; window "
        f"{cfg['window_s']:g} s per step; transceiver on CPU {result['cpus']['transceiver']}, "
        f"callers + relay worker on CPU {result['cpus']['clients']}; the callers send "
        f"{CALLER_AUDIO_TEXT[cfg.get('caller_audio', TONE)]}"
    )
    encoder = result.get("encoder", {})
    if encoder:
        echo(
            f"opus encoder of the pcm16 calls (the transceiver's --opus-* options): "
            f"{encoder['said']} ({encoder['libopus']}); opus calls pass the caller's packets "
            "through and encode nothing"
        )
    echo(
        f"codec only (libopus decode + encode of the callers' audio, the transceiver's codec "
        f"classes with the same encoder settings, on its core): "
        f"{codec['before']['total_pct']:.3f}% of a core per call before the steps, "
        f"{codec['after']['total_pct']:.3f}% after; reference "
        f"{summary['codec_cpu_per_call_pct']:.3f}%"
    )
    for fmt, figures in result["formats"].items():
        echo("")
        echo(f"audio format {fmt}: {FORMAT_TEXT.get(fmt, fmt)}")
        echo(HEADER)
        for s in figures["steps"]:
            echo(step_line(s, judged=not cfg.get("quick", False)))
        print_step_notes(figures["steps"], echo)
        print_format_summary(fmt, figures, summary["by_format"][fmt], cfg, echo)
        if "overload" in figures:
            print_overload(figures["overload"], echo, step_line)
    if "variants" in summary:
        base = EncoderSettings(**encoder["settings"])
        print_comparison(summary["variants"], base, echo)
    echo("")
    echo(
        "echo ms: dly95, the echo's delay over the window, p95 over the calls (each call matches "
        "what it hears with the frame of its tone loop it echoes: exactly for passed-through "
        "packets, by the loop's level pattern for re-encoded ones); lag, frames sent - frames "
        "heard back since the call began x 20 ms, worst call: the delay plus every frame lost"
    )
    echo(
        "%core: CPU time of those processes (all threads, /proc/<pid>/task/*/schedstat) in % of "
        "one core; others c0/c1: busy time of the transceiver's / the callers' CPUs (/proc/stat) "
        "that none of ours used; N#2: a second attempt of a step disturbed by others' work."
    )
    for note in dict.fromkeys(result["notes"]):  # a series each may say the same
        echo(f"note: {note}")


def print_step_notes(steps: list[dict[str, Any]], echo: Echo) -> None:
    for s in steps:
        step = f"N={s['sessions']}" + ("" if s["attempt"] == 1 else f"#{s['attempt']}")
        if s["limit_evidence"]:
            what = "busy" if s["ok"] else "limit"
            echo(f"{step} {what}: {'; '.join(s['limit_evidence'])}")
        if s["errors"]:
            echo(f"{step} errors: {'; '.join(s['errors'])}")
        if math.isfinite(s.get("loop_lag_ms", math.nan)):
            echo(
                f"{step} admission inputs at the window's end: event loop "
                f"{s['loop_lag_ms']:.1f} ms late, CPU {s['admission_cpu_pct']:.0f}% (2 s means)"
            )


def print_format_summary(
    fmt: str, figures: dict[str, Any], s: dict[str, Any], cfg: dict[str, Any], echo: Echo
) -> None:
    echo(
        f"transceiver idle (no session): {figures['transceiver_idle_cpu_pct']:.2f}% of a core, "
        f"{figures['transceiver_idle_rss_mb']:.0f} MB"
    )
    echo(
        f"largest N measured with every call under {cfg['max_loss_pct']:g}% frame loss and the "
        f"transceiver under {TRANSCEIVER_SATURATED_PCT:.0f}% of its core: "
        f"{s['largest_n_under_loss']}"
    )
    if s["sessions_per_core_derived"]:
        echo(
            f"CPU per call {s['cpu_per_session_pct']:.3f}% of a core (marginal, idle cost "
            f"removed: {s['marginal_cpu_per_session_pct']:.3f}%) = {s['codec_ratio']:.2f} x the "
            f"codec-only reference; sessions per core (derived: 100 / CPU per call at N="
            f"{s['largest_n_under_loss']}): {s['sessions_per_core_derived']:.1f}"
        )
        echo(
            f"at N={s['largest_n_under_loss']}: connect p50/p95 "
            f"{_f(s['connect_ms'].get('p50'))}/{_f(s['connect_ms'].get('p95'))} ms, first echo "
            f"{_f(s['first_echo_ms'].get('p50'))}/{_f(s['first_echo_ms'].get('p95'))} ms, echo "
            f"delay p95 {_f(s['echo_delay_p95_ms'])} ms (lag p95 {_f(s['echo_lag_p95_ms'])} ms)"
        )
    slope = s.get("cpu_slope_per_session_pct")
    if slope:
        echo(
            f"CPU one more call adds (least-squares slope over the steps that passed): "
            f"{slope:.3f}% of a core, {100 / slope:.0f} calls per core at the margin "
            "(for planning; the criterion is judged on CPU per call)"
        )
    if s["rss_mb_per_call"] is not None:
        echo(f"memory per call (RSS slope over N, idle as N = 0): {s['rss_mb_per_call']:.2f} MB")
    c = s["criterion"]
    audio = cfg.get("caller_audio", TONE)
    said = verdict(c["pass"], cfg.get("quick", False))
    if audio != TONE and not cfg.get("quick", False):
        said = f"SKIP (the callers send {audio}: criterion not judged)"
    echo(f"{said} ({c['basis']}) {c['name']}: {c['detail']}")


def parse_sessions(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter("a comma-separated list of counts, e.g. 5,10,20,30") from None
    if not out or any(n < 1 or n > 200 for n in out) or list(out) != sorted(set(out)):
        raise click.BadParameter("increasing counts between 1 and 200, e.g. 5,10,20,30")
    return out


EXAMPLES = """
\b
Examples:
  rtcedge bench sessions                         # pcm16 then opus; N = 10, 20, 40, 60, 80
  rtcedge bench sessions --audio-format pcm16 --sessions 20,30,40 --overload 1.5
  rtcedge bench sessions --quick                 # smoke test: N = 2, 2 s window
  rtcedge bench sessions --audio-format pcm16 --sessions 20 --opus-complexity 5
  rtcedge bench sessions --audio-format pcm16 --sessions 20 --vary opus-complexity=5 \\
      --vary opus-complexity=1 --vary opus-fec=on,opus-packet-loss=10 --vary opus-dtx=on
\b
Measures the codec-only reference (libopus decode + encode of the same audio, on the
transceiver's core, with the transceiver's encoder settings: the --opus-* options) before and
after the steps, then runs the steps for each audio format; with --vary, then a pcm16 series
per variant of the encoder settings and the base's once more, and a table of what each costs
per call against the base (bench/encoder_variants.py).
Prints a line per step as it goes, then per format a table and PASS/FAIL: pcm16, CPU per call
<= 2.5 x the codec-only reference; opus, >= 300 sessions per core derived from CPU per call;
both with every call under 1% frame loss and echo lag p95 <= 60 ms at the largest N that passed
(a --quick run does not judge them). Writes the JSON result and its plot; exits 0 whatever the
figures are.
"""


@click.command("sessions", epilog=EXAMPLES)
@click.option(
    "--sessions",
    "sessions",
    default="10,20,40,60,80",
    show_default=True,
    callback=parse_sessions,
    help="Concurrent calls per step, increasing.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.5, max=120),
    default=10.0,
    show_default=True,
    help="Measured window of a step.",
)
@click.option(
    "--calls-per-worker",
    type=click.IntRange(min=1, max=50),
    default=10,
    show_default=True,
    help="Calls per caller process (each runs one asyncio loop).",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=30, max=3600),
    default=600.0,
    show_default=True,
    help="Deadline of the whole run; steps that would not fit are skipped.",
)
@out_option
@click.option(
    "--retries",
    type=click.IntRange(min=0, max=3),
    default=1,
    show_default=True,
    help="Repeats of a step that lost frames while others' work took >= 10% of one of our CPUs.",
)
@click.option(
    "--overload",
    type=click.FloatRange(min=1.0, max=3.0),
    default=None,
    help="After the steps, offer this many times the largest N that passed, at once, to a "
    "transceiver with its default admission: admitted calls must keep < 1%% frame loss, the "
    "rest get 503 + Retry-After (e.g. 1.5).",
)
@click.option(
    "--audio-format",
    type=click.Choice([PCM16, OPUS]),
    multiple=True,
    default=(PCM16, OPUS),
    show_default=True,
    help="The echo backend's audio, a series of steps each (repeat the option): decoded PCM16, "
    "or Opus passed through (no codec work).",
)
@callers_option
@click.option(
    "--caller-audio",
    type=click.Choice(CALLER_AUDIO),
    default=TONE,
    show_default=True,
    help="What the callers send (and the codec-only reference decodes): the tone (never "
    "silent), beeps (100 ms of tone a second), or speech (a sentence by espeak-ng, then 1.5 s "
    "of silence): with silence, what DTX is for. Frame loss counts audible frames only: with "
    "beeps or speech the steps' verdicts mean nothing, their CPU still does.",
)
@click.option(
    "--vary",
    "variants",
    multiple=True,
    metavar="SETTING=VALUE[,...]",
    help="Then a pcm16 series against a transceiver whose encoder differs from the --opus-* "
    "settings so (e.g. opus-complexity=5; opus-fec=on,opus-packet-loss=10); repeatable, a "
    "series each, and the base's once more at the end.",
)
@codec_options.click_options
@click.option("--quick", is_flag=True, help="N = 2, 2 s window: a smoke test, not a measurement.")
def sessions_bench(
    sessions: tuple[int, ...],
    seconds: float,
    calls_per_worker: int,
    max_seconds: float,
    out_dir: str,
    retries: int,
    overload: float | None,
    audio_format: tuple[str, ...],
    callers: str,
    caller_audio: str,
    variants: tuple[str, ...],
    quick: bool,
    **opus: Any,
) -> None:
    """Concurrent echo calls per transceiver core: connect time, first echo, loss, CPU/session."""
    try:
        encoder = codec_options.settings_of(opus)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    varied = tuple(parse_variant(text, encoder) for text in variants)
    formats = tuple(dict.fromkeys(audio_format))
    if varied and PCM16 not in formats:
        formats = (PCM16, *formats)  # the base the variants are compared with
    common = {
        "encoder": encoder,
        "variants": varied,
        "caller_audio": caller_audio,
        "audio_formats": formats,
        "light_callers": callers == "light",
        "calls_per_worker": calls_per_worker,
        "out_dir": out_dir,
        "overload": overload or 0.0,
    }
    if quick:
        cfg = BenchConfig(
            sessions=(2,),
            window_s=2.0,
            settle_s=1.0,
            idle_s=0.5,
            max_seconds=min(max_seconds, 120.0),
            retries=0,
            quick=True,
            **common,
        )
    else:
        cfg = BenchConfig(
            sessions=sessions,
            window_s=seconds,
            max_seconds=max_seconds,
            retries=retries,
            **common,
        )
    run_and_report("sessions", lambda: run(cfg), print_report, cfg.out_dir, sessions_figure)


if __name__ == "__main__":
    sessions_bench()
