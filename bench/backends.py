"""Backends benchmark: what the transceiver adds between WebRTC callers and a network backend,
in latency per direction and in CPU per call against a pcm16 echo call of the same audio format.

``rtcedge bench backends --backend NAME|all`` (``rtcedge bench sessions --backend NAME`` is the
same command; ``rtcedge bench realtime`` is ``--backend realtime``) checks issue 23's and issue
24's acceptance: "added latency per direction p95 <= 2 ms at 20 calls; CPU per call for each
backend within 1.2x the echo backend of the same audio format". Each backend of ``BACKENDS``
has a stand-in server that answers a beep a second, and an echo reference at its PCM rate:

- ``realtime``: the example agent's ``--stand-in beep``; PCM16 at 24 kHz, base64 in JSON;
  its echo reference pcm16 at 24000 Hz.
- ``websocket`` (our native protocol): ``testbed/backend_standins.py --protocol websocket``;
  PCM16 at 24 kHz (``rtcedge.pcm16.24000``), binary; echo pcm16 at 24000 Hz.
- ``media-streams``: ``testbed/backend_standins.py --protocol media-streams``; mu-law at
  8 kHz, base64 in JSON; echo pcm16 at 8000 Hz.
- ``grpc``: ``testbed/backend_standins.py --protocol grpc``; PCM16 at 24 kHz in protobuf
  ``Pcm16`` messages on one HTTP/2 stream per call (its ``SessionAccept``); echo pcm16 at
  24000 Hz.

Per N concurrent calls (1, 20, 40 by default) and per round (``--rounds``, 2 by default: a
CPU ratio is the median of the rounds'), the backends of one rate run a step each and then
their echo reference, in one run, on the same cores. Below, "realtime" and "the agent" stand
for any backend and its stand-in ("append": the audio message up, "delta": down).

Set-up (``bench/sessions.py``'s plan): a transceiver per backend and per echo reference, each
behind a relay of its own (1 worker), all pinned with all their threads to the first allowed
CPU: e.g. one ``--backend realtime --backend-url ws://127.0.0.1:PORT/v1/realtime?model=bench``
against the example agent (``examples/voice_agent/agent.py --stand-in beep --log-events
FILE``), one echo ``pcm16`` at the same PCM rate (24 kHz: the same libopus work per frame as
the realtime call's). A stand-in's key goes in ``RTCEDGE_BACKEND_KEY``, never a command line.
A call is named in its backend's log by its first data-channel event (the agent's session
id) or by its WHIP resource (the session id it signs: what the native protocol's
``session_id``, Media Streams' ``callSid`` and gRPC's ``SessionStart`` carry). The callers
(light aiortc callers in ``testbed/caller_workers.py`` processes, WHIP through the relay, each
with a data channel), the relay worker, the agent and this process share the other CPU. Every
caller sends a beep a second (100 ms of its own tone, then 900 ms of Opus-encoded silence); the
agent answers every second from the caller's first audio on with 100 ms of 440 Hz then 800 ms
of silence, 4 x ahead of real time in 100 ms deltas, as model servers send. So the transceiver
decodes 50 frames a second per call in both steps, and encodes 45 (+3 silent ones) per realtime
call against the echo's 50.

The points timed, all on the machine's one wall clock, for the markers (a sound after silence:
``bench/realtime_latency.py``):

- **uplink** (a), issue 23's "the caller's RTP packet arriving at the transceiver -> the
  ``input_audio_buffer.append`` carrying it arriving at the model server": the loopback capture
  (``bench/loopback_capture.py``: ``AF_PACKET`` on ``lo``, the kernel's timestamp of each
  send) times the beep's first packet into the transceiver's socket (the relay's send) and the
  WebSocket message carrying it out of it (the transceiver's write, which on loopback puts it
  in the agent's socket). That is the transceiver's part: SRTP, the jitter buffer, libopus
  decode, base64, JSON, the WebSocket send and its event loop's waits. The jitter buffer
  releases a packet that is next in sequence at once (no prefetch); it holds one only behind a
  hole, which its event counters (lost, late, trimmed, resync) over the window show; a caller's
  packet is one 20 ms frame and one append, with no re-framing. End to end, the caller marks
  the packet as its sender sends it and the agent's event log times the append as its
  WebSocket hands it over; the stages between are the caller's own, the relay's hop, the
  transceiver's part and the agent's read.
- **downlink** (b), "``response.output_audio.delta`` leaving the model server -> the first RTP
  packet of that audio leaving toward the caller": the capture times the delta with the beep's
  first sound onto the WebSocket (the agent's write) and its first packet out of the
  transceiver's socket, toward the relay. That is the transceiver's part: the WebSocket read,
  JSON, base64, the outbound track's 20 ms framing and pacing, libopus encode, SRTP. A beep
  meets an empty queue (the agent's answers leave the playout idle for 100 ms each second), so
  its first frame goes into the slot the track holds open and leaves at once, or, with no slot
  open, on the next 20 ms tick; the report gives each beep's part by what held it: at once, on
  the tick, after a tick (one packet of its call left first: a tick sent the call's slot while
  the delta waited, up to a frame later) or behind earlier audio (two or more: the previous
  answer, come late, was still being played). End to end: the agent's log (just before the
  write) -> the caller's receive callback; the stages: the agent's own, the transceiver's part,
  the relay's hop, the caller's.
- the **echo reference**: a caller's beep through the echo transceiver, end to end (sent ->
  its echo's first sound heard) and the echo transceiver's part (into its socket -> out).

The measuring ends are processes on the shared CPU (callers, agent, relay, this process with
the capture's thread); their stages and how late their timers ran are reported beside the
figures. The criterion is judged on the transceiver's part where the capture runs (root or
CAP_NET_RAW), else on the end-to-end figures, an upper bound. CPU: each transceiver's CPU time
over the window (all threads, /proc/<pid>/task/*/schedstat) / N, its idle cost included; the
ratio realtime / echo at each N. A step repeats (``--retries``) while others' work took >= 10 %
of one of our cores; the least disturbed attempt is judged.

A step: N calls connect at once (even shares per caller worker), settle, a window is measured,
the callers' marks and the agent's log lines of the window are paired, every call hangs up
(WHIP DELETE) and ``sessions_active`` must return to 0. Bounded: every wait has a timeout, the
run a deadline (``--max-seconds``); every process started is stopped by PID.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
from yarl import URL

from bench.harness.bounds import Deadline
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.verdict import verdict
from bench.loopback_capture import FRAMINGS, WIRES, Capture, CaptureThread, Ports
from bench.plots.realtime import realtime_figure
from bench.realtime_latency import (
    Wire,
    agent_calls,
    downlink_split,
    echo_call,
    pooled,
    realtime_call,
    session_tag,
    spread,
    stage_spreads,
)
from bench.sessions import (
    connect_calls,
    measure_idle,
    parse_sessions,
    plan_cpus,
    share_out,
    start_relay_and,
    wait_sessions_ended,
)
from bench.sessions_step import DISTURBED_PCT, Processes, Snapshot, Step, cpu_figures, spread_ms
from common.hint import HintError, Keyring
from common.sessionid import verify_session_id
from testbed.backend_standins import StandInProcess
from testbed.caller_workers import BEEPS, hang_up, start_workers, timings
from testbed.procfs import core_pct, process_cpu_ns
from testbed.voice_agent import VoiceAgentProcess
from transceiver.call.outbound import PHASES

REALTIME, ECHO = "realtime", "echo"
ALL = "all"


# -- the backends ----------------------------------------------------------------------------------
def first_event_session(call: dict[str, Any], keyring: Keyring) -> str | None:
    """The agent's name of a call: its first data-channel event's id."""
    return session_tag(call.get("first_event_id"))


def resource_session(call: dict[str, Any], keyring: Keyring) -> str | None:
    """The call's session id, from its WHIP resource (signed with the relay's keyring): what
    the native protocol's ``session_id`` and Media Streams' ``callSid`` carry."""
    resource = str(call.get("location") or "").rsplit("/", 1)[-1]
    try:
        return verify_session_id(keyring, resource, time.time(), 24 * 3600.0).call_id
    except HintError:
        return None


@dataclass(frozen=True)
class BackendSpec:
    """One network backend in the benchmark: its stand-in server, how the transceiver reaches
    it, how its calls are named, and the PCM rate of its echo reference. Adding a backend is
    an entry of ``BACKENDS``, its stand-in and, for its transceiver part, a reader of its wire
    in ``bench.loopback_capture.WIRES`` (None: judged end to end only)."""

    name: str
    rate_hz: int  # its calls' PCM rate in the transceiver: the echo reference's
    standin: Callable[[Path, Path], VoiceAgentProcess]  # (event log, stderr) -> not started
    args: Callable[[VoiceAgentProcess], list[str]]  # the transceiver's, the stand-in started
    session_of: Callable[[dict[str, Any], Keyring], str | None]  # a call's name in its log
    wire: str | None  # the key of its protocol in WIRES

    @property
    def reference(self) -> str:
        return reference_name(self.rate_hz)


def reference_name(rate_hz: int) -> str:
    return f"{ECHO}-{rate_hz}"


def standin_process(protocol: str, *args: str) -> Callable[[Path, Path], VoiceAgentProcess]:
    def make(log: Path, stderr: Path) -> VoiceAgentProcess:
        return StandInProcess(
            [*args, "--log-events", str(log)], stderr_path=stderr, protocol=protocol
        )

    return make


def agent_process(log: Path, stderr: Path) -> VoiceAgentProcess:
    return VoiceAgentProcess(["--stand-in", "beep", "--log-events", str(log)], stderr_path=stderr)


def realtime_args(agent: VoiceAgentProcess) -> list[str]:
    url = f"{agent.url}?model=bench"
    return ["--backend", REALTIME, "--backend-url", url, "--audio-rate", "24000"]


BACKENDS: dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            REALTIME,
            24000,
            agent_process,
            realtime_args,
            first_event_session,
            REALTIME,
        ),
        BackendSpec(
            "websocket",
            24000,
            standin_process("websocket", "--rate", "24000"),
            lambda s: ["--backend", "websocket", "--backend-url", s.url],
            resource_session,
            "websocket",
        ),
        BackendSpec(
            "media-streams",
            8000,
            standin_process("media-streams"),
            lambda s: ["--backend", "media-streams", "--backend-url", s.url],
            resource_session,
            "media-streams",
        ),
        BackendSpec(
            "grpc",
            24000,
            standin_process("grpc", "--rate", "24000"),
            lambda s: ["--backend", "grpc", "--backend-url", s.url],
            resource_session,
            "grpc",
        ),
    )
}


def plan_steps(
    names: tuple[str, ...], sessions: tuple[int, ...], rounds: int
) -> list[tuple[int, str, int]]:
    """(N, backend or reference, round) in order: at each N and round, the backends of each
    rate, then that rate's echo reference."""
    by_rate: dict[int, list[str]] = {}
    for name in names:
        by_rate.setdefault(BACKENDS[name].rate_hz, []).append(name)
    order = [name for rate, group in by_rate.items() for name in (*group, reference_name(rate))]
    return [(n, name, r) for n in sessions for r in range(rounds) for name in order]


MAX_P95_MS = 2.0  # the acceptance: added latency per direction, p95, at JUDGED_AT calls
MAX_CPU_RATIO = 1.2  # CPU per realtime call / CPU per pcm16 echo call
JUDGED_AT = 20
MIN_CALLS_FOR_TICKS = 4
JITTER_EVENTS = ("lost", "late", "trimmed", "resync")
STEP_OVERHEAD_S = 40.0  # worst case of a step besides its window: connect, settle, hang up
METHOD = {
    "backends": "'the agent' below: the backend's stand-in server (the example agent for "
    "realtime, testbed.backend_standins for the others); 'append' / 'delta': its protocol's "
    "audio message up / down (binary PCM16 frames, Media Streams' media)",
    "uplink": "end to end: caller sends the packet with its beep's first sound -> the agent's "
    "WebSocket hands over the append carrying it (wall clocks of one machine)",
    "downlink": "end to end: the agent is about to write the beep's first delta to its "
    "WebSocket -> the first packet with sound after silence is handed to the caller",
    "uplink_stages_ms": "loopback capture (kernel send times): caller (marked -> sent), relay "
    "(-> into the transceiver's socket), transceiver (-> its append written to the WebSocket), "
    "agent (-> read by the agent)",
    "downlink_stages_ms": "agent (logged -> its delta written to the WebSocket), transceiver "
    "(-> the first packet of that audio sent toward the relay), relay (-> sent to the caller), "
    "caller (-> handed to the caller)",
    "downlink_split": "end_to_end: on_tick if the onset's next packet came 20 +- 0.5 ms later; "
    "transceiver: at_once, on_tick (by its next packet's send), after_a_tick (one packet of the "
    "call left between the delta's arrival and the beep's first), behind_earlier_audio (two or "
    "more: an earlier answer still playing)",
    "tick_span_ms": "first to last packet of each 20 ms tick of the transceiver (its loop held)",
    "round_trip": "echo transceiver: the caller's beep sent -> the first sound of its echo heard",
    "cpu_per_session": "transceiver CPU time over the window (all threads) / N, idle included",
    "caller_late_ms": "how late the callers' beeps left (their 20 ms send ticks, their event "
    "loops), against the earliest of each call's window",
    "agent_late_ms": "how late the agent's beep timers fired, against the earliest",
}


@dataclass(frozen=True)
class RealtimeConfig:
    backends: tuple[str, ...] = (REALTIME,)  # of BACKENDS
    name: str = "backends"  # of the result's file
    sessions: tuple[int, ...] = (1, 20, 40)
    window_s: float = 10.0
    settle_s: float = 3.0  # between "all connected" and the window: the first beeps have gone
    idle_s: float = 2.0  # each transceiver's CPU with no session, before the first step
    calls_per_worker: int = 10
    connect_timeout_s: float = 15.0
    drain_timeout_s: float = 15.0
    max_seconds: float = 900.0
    retries: int = 1  # of a step disturbed by others' work on the machine (``disturbance``)
    rounds: int = 2  # realtime then echo, this many times at each N (the ratio: their median)
    judged_at: int = JUDGED_AT
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False

    @property
    def workers(self) -> int:
        return max(1, math.ceil(max(self.sessions) / self.calls_per_worker))


@dataclass
class LatencyStep(Step):
    """A sessions step's figures (connect, CPU) and the latencies of one backend's calls."""

    backend: str = REALTIME
    round: int = 1  # of the alternation realtime, echo at this N
    uplink_ms: dict[str, float] = field(default_factory=dict)
    downlink_ms: dict[str, float] = field(default_factory=dict)
    downlink_split: dict[str, Any] = field(default_factory=dict)
    round_trip_ms: dict[str, float] = field(default_factory=dict)
    unmatched: dict[str, int] = field(default_factory=dict)
    caller_late_ms: dict[str, float] = field(default_factory=dict)
    agent_late_ms: dict[str, float] = field(default_factory=dict)
    agent_cpu_pct: float = math.nan
    frames_out_per_call_s: float = math.nan  # backend audio frames encoded toward each caller
    jitter_events: dict[str, float] = field(default_factory=dict)
    unpaired_sessions: int = 0  # calls whose agent session could not be named
    # With the loopback capture: each direction's stages (the transceiver's socket in -> socket
    # out among them), and what the capture cost and saw.
    uplink_stages_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    downlink_stages_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    capture: dict[str, Any] = field(default_factory=dict)
    echo_transceiver_ms: dict[str, float] = field(default_factory=dict)  # the echo's in -> out
    # How long the transceiver's 20 ms ticks held its loop (first to last packet of a tick).
    tick_span_ms: dict[str, float] = field(default_factory=dict)


@dataclass
class Bench:
    """What the steps run against: the processes of each backend and echo reference, each
    backend's stand-in and its log."""

    procs: dict[str, Processes]
    standins: dict[str, VoiceAgentProcess]
    logs: dict[str, Path]

    def standin_of(self, name: str) -> VoiceAgentProcess:
        """A backend's stand-in; a reference's: its rate's first backend's (whose CPU and port
        its steps watch too, at the same cost)."""
        if name in self.standins:
            return self.standins[name]
        return next(self.standins[b] for b in self.standins if BACKENDS[b].reference == name)


# -- one step --------------------------------------------------------------------------------------
def run_step(n: int, backend: str, cfg: RealtimeConfig, bench: Bench) -> LatencyStep:
    """N calls at once to ``backend``'s transceiver: connect, settle, measure a window, pair
    the markers, hang up; ``sessions_active`` must return to 0."""
    procs = bench.procs[backend]
    assert procs.trx.proc is not None
    step = LatencyStep(n, backend=backend)
    pin_process(procs.trx.proc.pid, procs.cpus["transceiver"])
    shares = share_out(n, procs.workers)
    log = bench.logs.get(backend)
    log_from = log.stat().st_size if log is not None else 0
    capture = start_capture(step, bench, procs)
    interrupted = False
    try:
        calls = connect_calls(step, shares, procs.trx.url, cfg.connect_timeout_s, True, BEEPS)
        step.connect_ms = spread_ms(
            [c["offer_to_connected_s"] for c in calls.values() if c["offer_to_connected_s"]]
        )
        if not step.failed:
            window = measure_window(step, cfg, bench, procs)
            replies = timings(list(shares), window[0] - 1.0)
            wire = stop_capture(step, capture)
            calls_timed = [c for r in replies for c in r["calls"]]
            latencies(step, calls_timed, window, bench, log_from, wire)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: no goodbyes, the workers are stopped by PID
        interrupted = True
        raise
    finally:
        if capture is not None:
            capture.stop()
        if not interrupted:
            hang_up(list(shares))
    step.sessions_active_after = wait_sessions_ended(procs.trx, cfg.drain_timeout_s)
    step.ok = step.failed == 0 and step.sessions_active_after == 0
    if step.sessions_active_after != 0 and not step.stop_reason:
        step.stop_reason = f"{step.sessions_active_after:.0f} sessions still active after hang-up"
    return step


def measure_window(
    step: LatencyStep,
    cfg: RealtimeConfig,
    bench: Bench,
    procs: Processes,
) -> tuple[float, float]:
    """Settle, then a window bounded by a snapshot of the processes at each end: CPU, the
    transceiver's frame and jitter-buffer counters, the stand-in's CPU. Returns its wall
    times."""
    assert procs.trx.proc is not None
    agent = bench.standin_of(step.backend)
    time.sleep(cfg.settle_s)
    pin_process(procs.trx.proc.pid, procs.cpus["transceiver"])  # threads of the new calls
    a, agent_a, jitter_a, wall_a = take(procs, agent)
    time.sleep(cfg.window_s)
    b, agent_b, jitter_b, wall_b = take(procs, agent)
    cpu_figures(step, a, b, procs.cpus)
    step.agent_cpu_pct = core_pct(agent_b - agent_a, b.t - a.t)
    step.others_on_callers_cores_pct = max(
        0.0, step.others_on_callers_cores_pct - step.agent_cpu_pct
    )
    step.frames_out_per_call_s = (b.frames_out - a.frames_out) / (b.t - a.t) / step.sessions
    step.jitter_events = {e: jitter_b[e] - jitter_a[e] for e in JITTER_EVENTS}
    step.loop_lag_ms = 1000 * b.loop_lag_s  # the transceiver's own gauge (2 s mean)
    return wall_a, wall_b


def take(
    procs: Processes, agent: VoiceAgentProcess
) -> tuple[Snapshot, int, dict[str, float], float]:
    """The processes' snapshot, the stand-in's CPU time, the jitter buffer's events, wall
    time."""
    assert agent.proc is not None
    snap = Snapshot.take(procs)
    agent_ns = process_cpu_ns(agent.proc.pid)[0]
    jitter = {}
    for event in JITTER_EVENTS:
        try:
            jitter[event] = procs.trx.metric("rtcedge_transceiver_audio_jitter_events", event=event)
        except OSError:
            jitter[event] = math.nan
    return snap, agent_ns, jitter, time.time()


def start_capture(step: LatencyStep, bench: Bench, procs: Processes) -> CaptureThread | None:
    """The loopback capture of a step (the same cost in both backends' steps), from before its
    calls connect (it must see each WebSocket's upgrade, each HTTP/2 preface); None where this
    process may not capture (said in the step)."""
    ports = Ports(
        procs.relay.port, procs.trx.media_port, URL(bench.standin_of(step.backend).url).port or 0
    )
    spec = BACKENDS.get(step.backend)
    key = spec.wire or "" if spec is not None else ""
    wire, framing = WIRES.get(key), FRAMINGS.get(key)
    if wire is None:
        capture = CaptureThread(Capture(ports))
    elif framing is None:
        capture = CaptureThread(Capture(ports, wire))
    else:
        capture = CaptureThread(Capture(ports, wire, framing))
    if not capture.start():
        step.capture = {"error": capture.error}
        return None
    return capture


def stop_capture(step: LatencyStep, capture: CaptureThread | None) -> Wire | None:
    """Stop the capture; what it saw, for pairing with the markers."""
    if capture is None:
        return None
    capture.stop()
    seen = capture.capture
    sessions = {tag: (c.appends, c.deltas) for tag, c in seen.by_session().items()}
    wire = Wire(seen.rtp, sessions)
    step.capture = {
        "error": capture.error,
        "rtp_packets": seen.packets,
        "websockets": len(seen.connections),
        "sessions_named": len(sessions),
        "cpu_s": capture.cpu_s,
    }
    if step.sessions >= MIN_CALLS_FOR_TICKS:  # a tick of one or two calls is no burst
        # A tick serves the calls of one of the clock's phases (transceiver.call.outbound).
        per_tick = max(2, step.sessions // (2 * PHASES))
        step.tick_span_ms = spread(wire.tick_spans_ms(min_packets=per_tick))
    return wire


def latencies(
    step: LatencyStep,
    calls: list[dict[str, Any]],
    window: tuple[float, float],
    bench: Bench,
    log_from: int,
    wire: Wire | None,
) -> None:
    """Pair the callers' marks with the stand-in's log (a backend) or with their own echo
    (a reference)."""
    spec = BACKENDS.get(step.backend)
    if spec is None:
        figures = [echo_call(c, window, wire) for c in calls]
        step.round_trip_ms = pooled(figures, "round_trip_ms")
        step.echo_transceiver_ms = pooled(figures, "echo_transceiver_ms")
    else:
        sessions = agent_calls(read_log(bench.logs[step.backend], log_from))
        keyring = bench.procs[step.backend].relay.keyring
        figures = []
        for c in calls:
            tag = spec.session_of(c, keyring)
            figures.append(realtime_call(c, sessions.get(tag or ""), window, wire, tag))
        step.unpaired_sessions = sum("error" in f for f in figures)
        step.uplink_ms = pooled(figures, "uplink_ms")
        step.downlink_ms = pooled(figures, "downlink_ms")
        step.downlink_split = downlink_split(figures)
        step.agent_late_ms = pooled(figures, "agent_late_ms")
        if wire is not None:
            step.uplink_stages_ms = stage_spreads(figures, "uplink_stages_ms")
            step.downlink_stages_ms = stage_spreads(figures, "downlink_stages_ms")
    step.caller_late_ms = pooled(figures, "caller_late_ms")
    missed: collections.Counter[str] = collections.Counter()
    for f in figures:
        missed.update(f.get("unmatched", {}))
    step.unmatched = dict(missed)
    step.calls = figures


def read_log(path: Path, offset: int) -> list[dict[str, Any]]:
    """The agent's event log lines written since ``offset`` (bytes), whole lines only."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    lines = []
    for raw in data.split(b"\n"):
        with contextlib.suppress(ValueError):
            lines.append(json.loads(raw))
    return lines


# -- the run ---------------------------------------------------------------------------------------
def expected_step_s(n: int, cfg: RealtimeConfig) -> float:
    return 4.0 + 0.3 * n + cfg.settle_s + cfg.window_s


def start_bench(
    cfg: RealtimeConfig, stack: contextlib.ExitStack, tmp: Path, notes: list[str]
) -> tuple[Bench, dict[str, set[int]]]:
    """The stand-ins, a relay and a transceiver per backend and per echo reference, the caller
    workers: pinned, ready."""
    allowed = stack.enter_context(own_cpus_restored())
    cpus = plan_cpus(allowed, notes)
    os.sched_setaffinity(0, cpus["clients"])  # the stand-ins inherit the callers' CPUs
    standins, logs = {}, {}
    args: dict[str, list[str]] = {}
    envs: dict[str, dict[str, str]] = {}
    for name in cfg.backends:
        spec = BACKENDS[name]
        logs[name] = tmp / f"{name}-events.jsonl"
        logs[name].touch()
        standin = spec.standin(logs[name], tmp / f"{name}-standin.log")
        stack.callback(standin.stop)
        standins[name] = standin.start()
        args[name] = spec.args(standin)
        envs[name] = {"RTCEDGE_BACKEND_KEY": standin.key}  # never a command line
    for rate in dict.fromkeys(BACKENDS[name].rate_hz for name in cfg.backends):
        args[reference_name(rate)] = ["--audio-format", "pcm16", "--audio-rate", str(rate)]
        envs[reference_name(rate)] = {}
    # A relay each: a relay sends a packet from an address it has a confirmed flow for to that
    # flow's transceiver, unread, so a caller's port reused from the last step's calls to
    # another transceiver would reach that one until the flow idled out.
    running = {}
    for name, backend_args in args.items():
        log = collections.deque(maxlen=200)
        (trx,), relay = start_relay_and(
            [backend_args], max(cfg.sessions) + 10, stack, cpus, [log], notes, [envs[name]]
        )
        running[name] = (trx, relay)
    workers = start_workers(cfg.workers, cfg.max_seconds + 60, tmp, stack)
    for w in workers:
        pin_process(w.pid, cpus["clients"])
    procs = {
        name: Processes(trx, relay, relay.worker_pids(), workers, cpus)
        for name, (trx, relay) in running.items()
    }
    return Bench(procs, standins, logs), cpus


def run(cfg: RealtimeConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, run the steps (at each N and round, the backends of each rate then
    its echo reference), tear everything down (by PID) whatever happens."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        deadline = Deadline.after(cfg.max_seconds)
        started, load = utc_now(), os.getloadavg()
        notes: list[str] = []
        bench, cpus = start_bench(cfg, stack, Path(tmp), notes)
        idle = {name: measure_idle(p, cfg.idle_s) for name, p in bench.procs.items()}
        workers = len(next(iter(bench.procs.values())).workers)
        echo(
            f"transceivers ({', '.join(idle)}) on CPU {sorted(cpus['transceiver'])}, idle "
            f"{' / '.join(f'{figures[0]:.2f}' for figures in idle.values())} % of a core; "
            f"stand-ins, relay workers and {workers} caller workers on CPU "
            f"{sorted(cpus['clients'])}"
        )
        plan = plan_steps(cfg.backends, cfg.sessions, cfg.rounds)
        progress = Progress([expected_step_s(n, cfg) for n, _, _ in plan], echo, cfg.quick)
        order = ", ".join(dict.fromkeys(name for _, name, _ in plan))
        progress.announce(f"N = {', '.join(map(str, cfg.sessions))}; {order}; {cfg.rounds} x each")
        steps = run_steps(plan, cfg, bench, deadline, notes, progress)
        for name, p in bench.procs.items():
            if p.trx.proc is not None and p.trx.proc.poll() is not None:
                notes.append(f"the {name} transceiver exited")
        allowed = cpus["transceiver"] | cpus["clients"]
    result = run_header(cfg.name, started, allowed, cfg)
    result["cpus"] = {name: sorted(group) for name, group in cpus.items()}
    result["load_before"] = list(load)
    result["load_after"] = list(os.getloadavg())
    result["method"] = METHOD
    result["idle_cpu_pct"] = {name: figures[0] for name, figures in idle.items()}
    result["steps"] = [asdict(s) for s in steps]
    result["notes"] = list(dict.fromkeys(notes))
    result["summary"] = summarize(result["steps"], cfg)
    return result


def run_steps(
    plan: list[tuple[int, str, int]],
    cfg: RealtimeConfig,
    bench: Bench,
    deadline: Deadline,
    notes: list[str],
    progress: Progress,
) -> list[LatencyStep]:
    """The steps in order, each again while others' work disturbed it (``cfg.retries`` times
    at most), up to one that failed, the run's deadline or an error."""
    steps: list[LatencyStep] = []
    for i, (n, backend, round_) in enumerate(plan):
        for attempt in range(1, cfg.retries + 2):
            if deadline.left_s() < cfg.window_s + cfg.settle_s + STEP_OVERHEAD_S:
                notes.append(f"stopped before N={n} {backend}: the run's deadline")
                progress.skip(len(plan) - i)
                return steps
            try:
                step = run_step(n, backend, cfg, bench)
            except (RuntimeError, OSError) as exc:  # report what was measured so far
                notes.append(f"step N={n} {backend} aborted: {exc}")
                progress.skip(len(plan) - i)
                return steps
            step.attempt, step.round = attempt, round_ + 1
            steps.append(step)
            progress.step(step_line(asdict(step)))
            if not step.ok:
                notes.append(f"stopped at N={n} {backend}: {step.stop_reason}")
                progress.skip(len(plan) - i - 1)
                return steps
            if attempt > cfg.retries or disturbance(asdict(step)) < DISTURBED_PCT:
                break
            progress.insert(expected_step_s(n, cfg))
            progress.echo(
                f"repeating N={n} {backend}: others' work took {disturbance(asdict(step)):.0f}% "
                "of one of our cores (a shared machine)"
            )
    return steps


def disturbance(step: dict[str, Any]) -> float:
    """Others' work on the busier of our cores during a step's window, % of a core."""
    return max(step["others_on_transceiver_core_pct"], step["others_on_callers_cores_pct"])


# -- summary and criteria --------------------------------------------------------------------------
def summarize(steps: list[dict[str, Any]], cfg: RealtimeConfig) -> dict[str, Any]:
    """Per backend, N and round: the backend's and its echo reference's CPU per call (each
    step's least disturbed attempt) and their ratio; per N the median ratio. Each backend's
    latency criterion at ``judged_at`` on its least disturbed step of any round."""
    kept: dict[tuple[int, int, str], dict[str, Any]] = {}
    for s in steps:
        key = (s["sessions"], s["round"], s["backend"])
        if key not in kept or disturbance(s) < disturbance(kept[key]):
            kept[key] = s
    out: dict[str, Any] = {
        "cpu_ratio_by_n": {},
        "cpu_ratios_by_round": {},
        "latency_judged_on": {},
        "criteria": [],
    }
    for name in cfg.backends:
        reference = BACKENDS[name].reference
        by_round: dict[int, list[float]] = {}
        for (n, round_, backend), s in sorted(kept.items()):
            echo = kept.get((n, round_, reference))
            if backend == name and echo is not None and echo["cpu_per_session_pct"] > 0:
                ratio = s["cpu_per_session_pct"] / echo["cpu_per_session_pct"]
                by_round.setdefault(n, []).append(ratio)
        mine = [s for (n, _, b), s in kept.items() if b == name and n == cfg.judged_at]
        judged = min(mine, key=disturbance) if mine else None
        ratios = {n: statistics.median(r) for n, r in by_round.items()}
        out["cpu_ratio_by_n"][name] = ratios
        out["cpu_ratios_by_round"][name] = by_round
        out["latency_judged_on"][name] = (
            {"round": judged["round"], "attempt": judged["attempt"]} if judged else None
        )
        out["criteria"] += [
            latency_criterion(judged, cfg, name),
            cpu_criterion(ratios, by_round, cfg, name, reference),
        ]
    return out


def latency_criterion(
    step: dict[str, Any] | None, cfg: RealtimeConfig, backend: str = REALTIME
) -> dict[str, Any]:
    """Judged on the transceiver's own part (its socket in -> socket out, from the loopback
    capture) where there is one, else on the end-to-end figures (an upper bound)."""
    name = (
        f"{backend}: transport latency the transceiver adds, per direction, p95 <= "
        f"{MAX_P95_MS:g} ms at {cfg.judged_at} calls"
    )
    if step is None or not step["uplink_ms"].get("n") or not step["downlink_ms"].get("n"):
        return {"name": name, "pass": False, "detail": f"no {backend} step at N={cfg.judged_at}"}
    up, down = step["uplink_ms"]["p95"], step["downlink_ms"]["p95"]
    raw = f"end to end (the measuring ends and the relay's hop included) {up:.2f} / {down:.2f} ms"
    own_up = step["uplink_stages_ms"].get("transceiver", {})
    own_down = step["downlink_stages_ms"].get("transceiver", {})
    if own_up.get("n") and own_down.get("n"):
        a, b = own_up["p95"], own_down["p95"]
        return {
            "name": name,
            "pass": a <= MAX_P95_MS and b <= MAX_P95_MS,
            "detail": f"the transceiver's socket in -> out (loopback capture): uplink p95 "
            f"{a:.2f} ms, downlink p95 {b:.2f} ms; {raw}",
        }
    why = step["capture"].get("error") or "the capture paired no marker"
    return {
        "name": name,
        "pass": up <= MAX_P95_MS and down <= MAX_P95_MS,
        "detail": f"{raw}, judged on these (no transceiver part: {why})",
    }


def cpu_criterion(
    ratios: dict[int, float],
    by_round: dict[int, list[float]],
    cfg: RealtimeConfig,
    backend: str = REALTIME,
    reference: str = ECHO,
) -> dict[str, Any]:
    name = (
        f"{backend}: CPU per call <= {MAX_CPU_RATIO:g} x a pcm16 echo call ({reference}), at "
        f"{cfg.judged_at}"
    )
    ratio = ratios.get(cfg.judged_at)
    if ratio is None:
        return {"name": name, "pass": False, "detail": f"no pair of steps at N={cfg.judged_at}"}
    rounds = ", ".join(f"{r:.2f}" for r in by_round[cfg.judged_at])
    others = ", ".join(f"N={n}: {r:.2f}" for n, r in ratios.items() if n != cfg.judged_at)
    return {
        "name": name,
        "pass": ratio <= MAX_CPU_RATIO,
        "detail": f"{ratio:.2f} x, the median of the rounds ({rounds})"
        + (f"; {others}" if others else ""),
    }


# -- report ----------------------------------------------------------------------------------------
def _f(value: Any, pattern: str = "{:.1f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return pattern.format(value)


def _p(d: dict[str, Any], pattern: str = "{:.2f}") -> str:
    return f"{_f(d.get('p50'), pattern)}/{_f(d.get('p95'), pattern)}"


HEADER = (
    f"{'N':>7} {'backend':<13} {'conn':>4} {'trx':>5} {'CPU/':>5} {'frm/':>4} "
    f"{'trx part ms':^11} {'uplink ms':^11} {'downlink ms':^11} {'echo rt ms':^11} "
    f"{'late ms p95':^11} {'callers':>7} {'relay':>5} {'stand':>5} {'others':^9}\n"
    f"{'':>7} {'':<13} {'':>4} {'%core':>5} {'call':>5} {'s':>4} "
    f"{'p95 up/dn':^11} {'p50/p95':^11} {'p50/p95':^11} {'p50/p95':^11} {'call/stand':^11} "
    f"{'%core':>7} {'%core':>5} {'%core':>5} {'c0/c1':^9}"
)


def step_line(d: dict[str, Any]) -> str:
    late = f"{_f(d['caller_late_ms'].get('p95'))}/{_f(d['agent_late_ms'].get('p95'))}"
    own = "/".join(
        _f((d[f"{direction}_stages_ms"].get("transceiver") or {}).get("p95"), "{:.2f}")
        for direction in ("uplink", "downlink")
    )
    n = f"{d['sessions']}" + ("" if d["attempt"] == 1 else f"#{d['attempt']}")
    n += f" r{d['round']}"
    return (
        f"{n:>7} {d['backend']:<13} {d['connected']:>4} "
        f"{_f(d['transceiver_cpu_pct']):>5} {_f(d['cpu_per_session_pct'], '{:.2f}'):>5} "
        f"{_f(d['frames_out_per_call_s'], '{:.0f}'):>4} {own:^11} "
        f"{_p(d['uplink_ms']):^11} {_p(d['downlink_ms']):^11} {_p(d['round_trip_ms']):^11} "
        f"{late:^11} {_f(d['clients_cpu_pct'], '{:.0f}'):>7} "
        f"{_f(d['relay_cpu_pct'], '{:.0f}'):>5} {_f(d['agent_cpu_pct'], '{:.0f}'):>5} "
        f"{_f(d['others_on_transceiver_core_pct'], '{:.0f}')}/"
        f"{_f(d['others_on_callers_cores_pct'], '{:.0f}')}"
    )


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"{cfg['name']}: calls through the relay into a transceiver per backend "
        f"({', '.join(cfg['backends'])}; each against its stand-in, a beep a second) and into "
        "an echo pcm16 one at each backend's rate, alternately; window "
        f"{cfg['window_s']:g} s; load average {result['load_before'][0]:.2f} before, "
        f"{result['load_after'][0]:.2f} after"
    )
    echo(HEADER)
    for s in result["steps"]:
        echo(step_line(s))
    echo("")
    for s in result["steps"]:
        print_step_notes(s, echo)
    for backend, ratios in result["summary"]["cpu_ratio_by_n"].items():
        if not ratios:
            continue
        by_round = result["summary"]["cpu_ratios_by_round"][backend]
        echo(
            f"CPU per call, {backend} / its echo reference, the median of the rounds: "
            + ", ".join(
                f"N={n}: {r:.2f} ({', '.join(f'{x:.2f}' for x in by_round[n])})"
                for n, r in ratios.items()
            )
        )
    echo(
        "trx part: the transceiver's socket in -> socket out (loopback capture): up, the beep's "
        "first packet in -> the audio message carrying it written to the WebSocket; down, the "
        "backend's message with it in -> its first packet out. uplink / downlink: end to end, "
        "caller -> stand-in / stand-in -> caller (the relay's hop and the measuring ends "
        "included; late ms: how late their timers ran); echo rt: a beep through the echo "
        "transceiver and back."
    )
    for c in result["summary"]["criteria"]:
        echo(f"{verdict(c['pass'], cfg.get('quick', False))} {c['name']}: {c['detail']}")
    for note in result["notes"]:
        echo(f"note: {note}")


def print_step_notes(s: dict[str, Any], echo: Echo) -> None:
    attempt = "" if s["attempt"] == 1 else f"#{s['attempt']}"
    step = f"N={s['sessions']}{attempt} round {s['round']} {s['backend']}"
    for direction in ("uplink", "downlink"):
        stages = s.get(f"{direction}_stages_ms") or {}
        if stages:
            echo(
                f"{step} {direction} by stage, p50/p95 ms: "
                + ", ".join(f"{name} {_p(figures)}" for name, figures in stages.items())
                + f" (n={stages['transceiver']['n']:.0f})"
            )
    split = (s.get("downlink_split") or {}).get("transceiver") or {}
    if any(v.get("n") for v in split.values()):
        echo(
            f"{step} downlink, the transceiver's part by what held the beep's first packet, "
            "n p50/p95 ms: "
            + ", ".join(f"{k.replace('_', ' ')} {v['n']:.0f} {_p(v)}" for k, v in split.items())
        )
    if s.get("tick_span_ms", {}).get("n"):
        echo(
            f"{step}: its ticks held the loop {_p(s['tick_span_ms'])} ms (p50/p95, first to "
            f"last packet of a tick; {PHASES} ticks a 20 ms period, each for its phase's calls)"
        )
    if (s.get("echo_transceiver_ms") or {}).get("n"):
        echo(
            f"{step}: a beep into the transceiver's socket -> its echo out "
            f"{_p(s['echo_transceiver_ms'])} ms (p50/p95)"
        )
    events = {k: v for k, v in s["jitter_events"].items() if v}
    missed = {k: v for k, v in s["unmatched"].items() if v}
    if s["backend"] in BACKENDS:
        echo(
            f"{step}: jitter buffer events {events or 'none'}, markers unmatched "
            f"{missed or 'none'}, calls without their stand-in session "
            f"{s.get('unpaired_sessions')}"
            + (f", capture: {s['capture']['error']}" if s["capture"].get("error") else "")
        )
    if s["errors"]:
        echo(f"{step} errors: {'; '.join(s['errors'])}")


EXAMPLES = """
\b
Examples:
  rtcedge bench backends                      # every backend: N = 1, 20, 40, twice each
  rtcedge bench backends --backend media-streams --sessions 20 --rounds 2 --seconds 10
  rtcedge bench sessions --backend websocket  # the same command
  rtcedge bench backends --backend websocket --quick   # smoke test: N = 1, 3 s window
\b
Prints a line per step as it goes, then the table, each step's stages and the CPU ratios, and
per backend PASS/FAIL for: the transceiver's part of the uplink and downlink, p95 <= 2 ms at 20
calls (end to end where the loopback capture cannot run: it needs root or CAP_NET_RAW); CPU
per call <= 1.2 x a pcm16 echo call at the backend's rate at 20 calls, the median of the rounds
(a --quick run does not judge them). Writes the JSON result and its plot; exits 0 whatever the
figures are.
"""


def measure_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options ``backends`` and ``realtime`` share (declared once)."""
    options = [
        click.option(
            "--sessions",
            "sessions",
            default="1,20,40",
            show_default=True,
            callback=parse_sessions,
            help="Concurrent calls per step, increasing; each N runs every backend and its "
            "echo reference.",
        ),
        click.option(
            "--seconds",
            type=click.FloatRange(min=2, max=120),
            default=10.0,
            show_default=True,
            help="Measured window of a step.",
        ),
        click.option(
            "--calls-per-worker",
            type=click.IntRange(min=1, max=50),
            default=10,
            show_default=True,
            help="Calls per caller process (each runs one asyncio loop).",
        ),
        click.option(
            "--max-seconds",
            type=click.FloatRange(min=30, max=3600),
            default=900.0,
            show_default=True,
            help="Deadline of the whole run; steps that would not fit are skipped.",
        ),
        out_option,
        click.option(
            "--retries",
            type=click.IntRange(min=0, max=3),
            default=1,
            show_default=True,
            help="Repeats of a step while others' work took >= 10% of one of our CPUs; the "
            "least disturbed attempt is judged.",
        ),
        click.option(
            "--rounds",
            type=click.IntRange(min=1, max=5),
            default=2,
            show_default=True,
            help="Each backend then its echo reference, this many times at each N; the CPU "
            "ratio is their median.",
        ),
        click.option(
            "--quick", is_flag=True, help="N = 1, 3 s window: a smoke test, not a measurement."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def bench_config(backends: tuple[str, ...], name: str, quick: bool, **given: Any) -> RealtimeConfig:
    """The run's configuration from the shared options."""
    if quick:
        return RealtimeConfig(
            backends=backends,
            name=name,
            sessions=(1,),
            window_s=3.0,
            settle_s=2.0,
            idle_s=0.5,
            calls_per_worker=given["calls_per_worker"],
            max_seconds=min(given["max_seconds"], 60.0 + 60.0 * len(backends)),
            retries=0,
            rounds=1,
            out_dir=given["out_dir"],
            quick=True,
        )
    return RealtimeConfig(
        backends=backends,
        name=name,
        sessions=given["sessions"],
        window_s=given["seconds"],
        calls_per_worker=given["calls_per_worker"],
        max_seconds=given["max_seconds"],
        retries=given["retries"],
        rounds=given["rounds"],
        out_dir=given["out_dir"],
    )


@click.command("backends", epilog=EXAMPLES)
@click.option(
    "--backend",
    "backend",
    type=click.Choice([*BACKENDS, ALL]),
    multiple=True,
    default=(ALL,),
    show_default=True,
    help="The backend under test, against its stand-in (repeat the option for several).",
)
@measure_options
def backends_bench(backend: tuple[str, ...], quick: bool, **given: Any) -> None:
    """Latency the transceiver adds per direction to each network backend, and CPU per call
    against an echo call of the same audio format."""
    names = tuple(BACKENDS) if ALL in backend else tuple(dict.fromkeys(backend))
    cfg = bench_config(names, "backends", quick, **given)
    run_and_report(cfg.name, lambda: run(cfg), print_report, cfg.out_dir, realtime_figure)


if __name__ == "__main__":
    backends_bench()
