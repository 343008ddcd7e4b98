"""A C media server beside rtcedge: the opus echo against Janus Gateway's EchoTest, the same
callers, the same call shape, one run.

``rtcedge bench peer`` (``rtcedge bench sessions --reference janus`` is the same command) runs,
per N concurrent calls and per round (``--rounds``, 2 by default), a trial on each server,
alternating (round 1 rtcedge then Janus, round 2 Janus then rtcedge, ...), each trial on a
fresh server:

- **rtcedge**: a relay (one worker) and a transceiver with the opus echo (``--audio-format
  opus``: the caller's packets passed back, no codec work), both on the server's core; calls
  go relay -> transceiver over loopback, as in ``rtcedge bench sessions``.
- **Janus** (``janus``, Debian package, 1.1.2 here): the EchoTest plugin, with a configuration
  written for the trial (``testbed/janus.py``: the EchoTest and the HTTP transport only, no
  event handlers or loggers, debug level 3) and its event loops as ``--janus-event-loops``
  says (0, its default: a thread and a GLib loop per handle; N: N shared loops). Janus skips
  loopback when it gathers ICE candidates, so it runs in a network namespace this benchmark
  makes (``testbed/netns.py``): a veth pair with a private /30 (10.254.x.y), its HTTP API and
  its one candidate on the namespace's end, the callers' candidate on ours. The namespace and
  the veth are deleted however the run ends (a run killed with SIGKILL leaves them to the next
  run, which deletes them).

The callers are the sessions benchmark's light aiortc callers (``testbed/caller_workers.py``:
a pre-encoded Opus tone on a 20 ms clock of their own, a data channel, the echo counted from
the socket's callback), the same worker processes for both servers, pinned with this process
to the other CPUs. A rtcedge call offers by WHIP; a Janus call makes its session and
EchoTest handle first (as a page does when it loads), then sends ``{"audio": true}`` with the
offer and reads the answer from the session's events. Connect time is the offer to connected
for both.

A trial: the server started on its core (every thread of it pinned there), its idle CPU over
``idle_s``, N calls at once, ``settle_s``, a window of ``--seconds`` bounded by a snapshot of
the server's CPU time (all threads of all its processes, /proc/<pid>/task/*/schedstat) and a
mark of the callers' counters at each end, every call hung up (WHIP DELETE; Janus: destroy
the session), the server stopped. Per call: frame loss (audible echo frames against the
window / 20 ms), RTP loss, the echo's delay (the arrival of each echo frame against when its
own frame was due to leave: byte for byte, both servers pass the packets through unchanged).
A trial passes when every call connected, heard its own echo and nobody else's, lost < 1 % of
its frames, the echo delay p95 stayed <= 60 ms and the server under 95 % of its core.

Per N the report gives, for both servers: CPU per call (median over the rounds; rtcedge's is
relay + transceiver, and the transceiver alone beside it), the ratio rtcedge / Janus, the
worst call's frame loss, connect time and echo delay p50/p95 over every call of the rounds;
then issue 26's criteria where their N was run: CPU per call at N = 40 <= 1.5 x Janus's, echo
delay p50 <= Janus's + 5 ms and p95 <= Janus's + 10 ms at N = 10 and 40, and the largest N
passed at least Janus's. A server whose every round failed at some N is not run at larger N.

Bounded: every wait has a timeout, the run a deadline (``--max-seconds``), the caller workers
one of their own; every process is stopped by PID, Janus dies with this process.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.harness.bounds import Deadline
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import cpus_of, own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import median_worst, percentile
from bench.harness.verdict import verdict
from bench.plots.peer import peer_figure
from bench.sessions import OPUS, parse_sessions, plan_cpus, share_out, start_relay_and
from bench.sessions_step import TRANSCEIVER_SATURATED_PCT, busy_pct, call_figures, spread_ms
from testbed.caller_workers import (
    JANUS,
    LOOPBACK,
    WHIP,
    WorkerProcess,
    connect,
    hang_up,
    mark,
    start_workers,
)
from testbed.janus import JanusProcess, janus_missing
from testbed.netns import NamespaceError, VethNamespace
from testbed.procfs import core_pct, cpu_idle_s, process_cpu_ns

RTCEDGE = "rtcedge"
SERVERS = (RTCEDGE, JANUS)
MAX_LOSS_PCT = 1.0
MAX_ECHO_DELAY_P95_MS = 60.0
MAX_CPU_RATIO = 1.5  # rtcedge / Janus at CPU_RATIO_N (issue 26), stretch 1.0
CPU_RATIO_N = 40
DELAY_NS = (10, 40)  # echo delay p50 <= Janus's + 5 ms, p95 <= Janus's + 10 ms there
DELAY_P50_MARGIN_MS = 5.0
DELAY_P95_MARGIN_MS = 10.0
TRIAL_OVERHEAD_S = 30.0  # a trial's worst case besides its window: start, connect, hang up
METHOD = {
    "cpu_per_call": "the server's CPU time over the window (every thread of every process: "
    "rtcedge relay + transceiver, Janus its one process; /proc/<pid>/task/*/schedstat) / N",
    "frame_loss": "1 - audible echo frames received / (window / 20 ms), per call",
    "echo_delay": "arrival - due send time of the loop frame each echo frame matches byte for "
    "byte, median per call over the window; p50/p95 over the calls of every round",
    "connect": "offer -> connected (ICE + DTLS), per call; Janus's session and handle are made "
    "before the offer (janus_open_s)",
}


@dataclass(frozen=True)
class PeerConfig:
    sessions: tuple[int, ...] = (10, 20, 40, 80)
    rounds: int = 2
    window_s: float = 10.0
    settle_s: float = 2.0  # between "all connected" and the window: first echoes arrive
    idle_s: float = 1.0  # the fresh server's CPU with no call
    calls_per_worker: int = 10
    connect_timeout_s: float = 20.0
    max_seconds: float = 1800.0
    max_loss_pct: float = MAX_LOSS_PCT
    reference: str = JANUS
    janus_event_loops: int = 0  # 0: Janus's default, a loop and thread per handle
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False  # a smoke test: the criteria are not judged

    @property
    def workers(self) -> int:
        return max(1, math.ceil(max(self.sessions) / self.calls_per_worker))


# -- the servers -----------------------------------------------------------------------------------
@dataclass
class Server:
    """A started server: where calls offer (``url``, ``signalling``), the address the callers'
    ICE gathers on to reach it (``host``), its processes by part (for their CPU time)."""

    name: str
    url: str
    signalling: str
    host: str
    parts: dict[str, list[int]]

    def pids(self) -> list[int]:
        return [pid for pids in self.parts.values() for pid in pids]

    def threads(self) -> int:
        return sum(len(os.listdir(f"/proc/{pid}/task")) for pid in self.pids())


def start_rtcedge(
    cfg: PeerConfig, cpus: dict[str, set[int]], stack: contextlib.ExitStack
) -> Server:
    """The relay and an opus echo transceiver, both on the server's core
    (``bench.sessions.start_relay_and``)."""
    server_cpus = {"transceiver": cpus["server"], "clients": cpus["clients"]}
    log: collections.deque[str] = collections.deque(maxlen=200)
    (trx,), relay = start_relay_and(
        [["--audio-format", OPUS]],
        max(cfg.sessions) + 10,
        stack,
        server_cpus,
        [log],
        [],
        relay_with_transceiver=True,
    )
    assert trx.proc is not None and relay.proc is not None
    relay_pids = [relay.proc.pid, *relay.worker_pids()]
    for pid in relay_pids:
        pin_process(pid, cpus["server"])
    return Server(
        RTCEDGE, trx.url, WHIP, LOOPBACK, {"transceiver": [trx.proc.pid], "relay": relay_pids}
    )


def start_janus(
    cfg: PeerConfig, cpus: dict[str, set[int]], ns: VethNamespace, stack: contextlib.ExitStack
) -> Server:
    """Janus in the namespace, started from the server's core (its threads inherit it), with
    a configuration folder of its own."""
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="janus-")))
    janus = JanusProcess(ns, folder, cfg.janus_event_loops)
    os.sched_setaffinity(0, cpus["server"])
    try:
        stack.callback(janus.stop)
        janus.start()
    finally:
        os.sched_setaffinity(0, cpus["clients"])
    assert janus.proc is not None
    pin_process(janus.proc.pid, cpus["server"])
    return Server(JANUS, janus.url, JANUS, ns.host_address, {"janus": [janus.proc.pid]})


# -- one trial: N calls on one fresh server --------------------------------------------------------
@dataclass
class Trial:
    server: str
    sessions: int
    round: int
    connected: int = 0
    errors: list[str] = field(default_factory=list)
    window_s: float = 0.0
    server_idle_cpu_pct: float = math.nan
    server_cpu_pct: float = math.nan  # every process of it, % of one core
    cpu_per_call_pct: float = math.nan
    parts_cpu_pct: dict[str, float] = field(default_factory=dict)  # by process: relay, ...
    server_threads: int = 0
    server_on_its_core: bool = True  # every thread's affinity the server's core at the end
    callers_cpu_pct: float = math.nan
    others_on_server_core_pct: float = math.nan  # busy time there none of ours used
    others_on_callers_cores_pct: float = math.nan
    connect_ms: dict[str, float] = field(default_factory=dict)
    first_echo_ms: dict[str, float] = field(default_factory=dict)
    janus_open_ms: dict[str, float] = field(default_factory=dict)
    echo_delay_ms: dict[str, float] = field(default_factory=dict)
    frame_loss_pct: dict[str, float] = field(default_factory=dict)  # median, worst
    rtp_loss_pct: dict[str, float] = field(default_factory=dict)
    echo_frames: int = 0  # audible echo frames the callers received in the window, all calls
    calls_over_loss: int = 0
    calls_without_echo: int = 0
    calls_hearing_others: int = 0
    ok: bool = False
    stop_reason: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Snap:
    t: float
    parts_ns: dict[str, int]
    workers_ns: int
    own_ns: int
    idle_s: dict[int, float]

    @staticmethod
    def take(server: Server, workers: list[WorkerProcess]) -> Snap:
        return Snap(
            t=time.monotonic(),
            parts_ns={
                part: sum(process_cpu_ns(pid)[0] for pid in pids)
                for part, pids in server.parts.items()
            },
            workers_ns=sum(process_cpu_ns(w.pid)[0] for w in workers),
            own_ns=process_cpu_ns(os.getpid())[0],
            idle_s=cpu_idle_s(),
        )


def run_trial(
    server: Server,
    n: int,
    round_: int,
    cfg: PeerConfig,
    workers: list[WorkerProcess],
    cpus: dict[str, set[int]],
) -> Trial:
    """N calls at once to ``server``: connect, settle, measure a window, hang up."""
    trial = Trial(server.name, n, round_)
    a = Snap.take(server, workers)
    time.sleep(cfg.idle_s)
    b = Snap.take(server, workers)
    trial.server_idle_cpu_pct = core_pct(
        sum(b.parts_ns.values()) - sum(a.parts_ns.values()), b.t - a.t
    )
    shares = share_out(n, workers)
    busy = list(shares)
    replies = connect(
        shares,
        server.url,
        cfg.connect_timeout_s,
        light=True,
        signalling=server.signalling,
        host=server.host,
    )
    calls = {c["id"]: c for reply in replies for c in reply["calls"]}
    trial.connected = sum(c["connected"] for c in calls.values())
    trial.errors = sorted({c["error"] for c in calls.values() if c["error"]})[:5]
    interrupted = False
    try:
        if trial.connected == n:
            measure_window(trial, server, calls, busy, workers, cfg, cpus)
        else:
            trial.stop_reason = f"{n - trial.connected} of {n} calls did not connect"
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if not interrupted:
            for reply in hang_up(busy):  # the final word on first echoes and tone checks
                for c in reply["calls"]:
                    calls[c["id"]].update(c)
    finish(trial, calls, cfg)
    return trial


def measure_window(
    trial: Trial,
    server: Server,
    calls: dict[int, dict[str, Any]],
    busy: list[WorkerProcess],
    workers: list[WorkerProcess],
    cfg: PeerConfig,
    cpus: dict[str, set[int]],
) -> None:
    """The window: the server's CPU and the callers' counters at each end."""
    time.sleep(cfg.settle_s)
    for pid in server.pids():  # threads the calls started
        pin_process(pid, cpus["server"])
    a, marks_a = Snap.take(server, workers), mark(busy)
    time.sleep(cfg.window_s)
    b, marks_b = Snap.take(server, workers), mark(busy)
    for ma, mb in zip(marks_a, marks_b, strict=True):
        for key, counts in ma["calls"].items():
            calls[int(key)].update(call_figures(counts, mb["calls"][key], mb["t"] - ma["t"]))
    wall_s = trial.window_s = b.t - a.t
    trial.parts_cpu_pct = {
        part: core_pct(b.parts_ns[part] - a.parts_ns[part], wall_s) for part in b.parts_ns
    }
    trial.server_cpu_pct = sum(trial.parts_cpu_pct.values())
    trial.cpu_per_call_pct = trial.server_cpu_pct / trial.sessions
    trial.server_threads = server.threads()
    trial.server_on_its_core = cpus_of(server.pids()) == cpus["server"]
    trial.callers_cpu_pct = core_pct(b.workers_ns - a.workers_ns, wall_s)
    own_pct = core_pct(b.own_ns - a.own_ns, wall_s)
    trial.others_on_server_core_pct = max(
        0.0,
        busy_pct(a, b, cpus["server"]) - trial.server_cpu_pct,  # type: ignore[arg-type]
    )
    trial.others_on_callers_cores_pct = max(
        0.0,
        busy_pct(a, b, cpus["clients"]) - trial.callers_cpu_pct - own_pct,  # type: ignore[arg-type]
    )


def finish(trial: Trial, calls: dict[int, dict[str, Any]], cfg: PeerConfig) -> None:
    """Summaries over the calls and the trial's verdict (module docstring)."""
    trial.calls = [calls[k] for k in sorted(calls)]
    measured = [c for c in trial.calls if "frame_loss_pct" in c]
    trial.connect_ms = spread_ms(_values(trial.calls, "offer_to_connected_s"))
    trial.first_echo_ms = spread_ms(_values(trial.calls, "offer_to_first_echo_s"))
    trial.janus_open_ms = spread_ms(_values(trial.calls, "janus_open_s"))
    delays = sorted(_values(trial.calls, "echo_delay_ms"))
    if delays:
        trial.echo_delay_ms = {
            "p50": percentile(delays, 0.5),
            "p95": percentile(delays, 0.95),
            "worst": delays[-1],
            "unmeasured": float(len(trial.calls) - len(delays)),
        }
    if measured:
        losses = [c["frame_loss_pct"] for c in measured]
        trial.frame_loss_pct = median_worst(losses)
        trial.rtp_loss_pct = median_worst([c["rtp_loss_pct"] for c in measured])
        trial.echo_frames = sum(c["echo_frames"] for c in measured)
        trial.calls_over_loss = sum(x >= cfg.max_loss_pct for x in losses)
        trial.calls_without_echo = sum(c["offer_to_first_echo_s"] is None for c in measured)
        trial.calls_hearing_others = sum(c["tone_checks_own"] < c["tone_checks"] for c in measured)
    delay_p95 = trial.echo_delay_ms.get("p95", math.nan)
    checks = [
        (not measured or len(measured) < trial.sessions, "nothing measured"),
        (
            trial.calls_hearing_others > 0,
            f"{trial.calls_hearing_others} calls heard a tone not their own",
        ),
        (trial.calls_without_echo > 0, f"{trial.calls_without_echo} calls never heard their echo"),
        (
            trial.calls_over_loss > 0,
            f"{trial.calls_over_loss} calls lost >= {cfg.max_loss_pct:g}% of their frames",
        ),
        (
            not delay_p95 <= MAX_ECHO_DELAY_P95_MS,
            f"echo delay p95 {delay_p95:.0f} ms > {MAX_ECHO_DELAY_P95_MS:.0f}",
        ),
        (
            trial.server_cpu_pct >= TRANSCEIVER_SATURATED_PCT,
            f"server saturated: {trial.server_cpu_pct:.0f}% of its core",
        ),
    ]
    failed = [reason for bad, reason in checks if bad]
    trial.ok = not trial.stop_reason and not failed
    trial.stop_reason = trial.stop_reason or (failed[0] if failed else "")


def _values(calls: list[dict[str, Any]], key: str) -> list[float]:
    return [c[key] for c in calls if c.get(key) is not None]


# -- the run ---------------------------------------------------------------------------------------
def trial_order(round_: int) -> tuple[str, ...]:
    """Round 1 rtcedge first, round 2 Janus first, and so on: neither always runs first."""
    return SERVERS if round_ % 2 == 1 else SERVERS[::-1]


def expected_trial_s(n: int, cfg: PeerConfig) -> float:
    return 5.0 + 0.2 * n + cfg.idle_s + cfg.settle_s + cfg.window_s


@contextlib.contextmanager
def started(
    name: str, cfg: PeerConfig, cpus: dict[str, set[int]], ns: VethNamespace
) -> Iterator[Server]:
    """A fresh server for one trial, stopped by PID on the way out."""
    with contextlib.ExitStack() as stack:
        if name == RTCEDGE:
            yield start_rtcedge(cfg, cpus, stack)
        else:
            yield start_janus(cfg, cpus, ns, stack)


def run_trials(
    cfg: PeerConfig,
    cpus: dict[str, set[int]],
    ns: VethNamespace,
    workers: list[WorkerProcess],
    notes: list[str],
    progress: Progress,
) -> list[Trial]:
    """Every N, every round, each server in ``trial_order``; a server that failed every round
    of an N is not run at larger N; the deadline stops the run between trials."""
    deadline = Deadline.after(cfg.max_seconds)
    trials: list[Trial] = []
    dropped: set[str] = set()
    for n in cfg.sessions:
        for round_ in range(1, cfg.rounds + 1):
            for name in trial_order(round_):
                if name in dropped:
                    progress.skip()
                    continue
                if deadline.left_s() < cfg.window_s + cfg.settle_s + TRIAL_OVERHEAD_S:
                    notes.append(
                        f"stopped before N={n}: the run's deadline ({cfg.max_seconds:.0f} s)"
                    )
                    return trials
                try:
                    with started(name, cfg, cpus, ns) as server:
                        trial = run_trial(server, n, round_, cfg, workers, cpus)
                except (RuntimeError, OSError) as exc:  # report what was measured so far
                    notes.append(f"{name} N={n} round {round_} aborted: {exc}")
                    progress.echo(f"stopping: {name} N={n} aborted: {exc}")
                    return trials
                trials.append(trial)
                progress.step(trial_line(asdict(trial), judged=not cfg.quick))
        for name in SERVERS:
            at_n = [t for t in trials if t.server == name and t.sessions == n]
            if name not in dropped and at_n and not any(t.ok for t in at_n):
                dropped.add(name)
                notes.append(f"{name}: every round failed at N={n}; not run at larger N")
    return trials


def run(cfg: PeerConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, run the trials, tear everything down (by PID, the namespace with
    them) whatever happens."""
    missing = janus_missing()
    if missing:
        raise click.ClickException(f"bench peer --reference janus: {missing}")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        started_utc = utc_now()
        notes: list[str] = []
        allowed = stack.enter_context(own_cpus_restored())
        plan = plan_cpus(allowed, notes)
        cpus = {"server": plan["transceiver"], "clients": plan["clients"]}
        try:
            ns = stack.enter_context(VethNamespace())
        except NamespaceError as exc:
            raise click.ClickException(f"bench peer: Janus's network namespace: {exc}") from None
        if ns.swept:
            notes.append(f"deleted what a killed run had left: {', '.join(ns.swept)}")
        os.sched_setaffinity(0, cpus["clients"])
        workers = start_workers(cfg.workers, cfg.max_seconds + 60, Path(tmp), stack)
        for w in workers:
            pin_process(w.pid, cpus["clients"])
        progress = Progress(
            [
                expected_trial_s(n, cfg)
                for n in cfg.sessions
                for _ in range(cfg.rounds * len(SERVERS))
            ],
            echo,
            cfg.quick,
        )
        loops = cfg.janus_event_loops or "its default: a loop and thread per handle"
        echo(
            f"servers on CPU {sorted(cpus['server'])}, {len(workers)} caller workers and this "
            f"process on CPU {sorted(cpus['clients'])}; Janus in namespace {ns.name} at "
            f"{ns.peer_address} (callers at {ns.host_address}), event loops: {loops}"
        )
        progress.announce(
            f"N = {', '.join(map(str, cfg.sessions))} concurrent calls, {cfg.rounds} round(s), "
            "rtcedge and Janus alternating"
        )
        trials = run_trials(cfg, cpus, ns, workers, notes, progress)
        link = {"namespace": ns.name, "host": ns.host_address, "peer": ns.peer_address}
    result = run_header("peer", started_utc, allowed, cfg)
    result["cpus"] = {name: sorted(group) for name, group in cpus.items()}
    result["link"] = link
    result["method"] = METHOD
    result["trials"] = [asdict(t) for t in trials]
    result["notes"] = notes
    result["summary"] = summarize(result["trials"], cfg)
    return result


# -- the figures per N -----------------------------------------------------------------------------
def summarize(trials: list[dict[str, Any]], cfg: PeerConfig) -> dict[str, Any]:
    """Per N, per server: CPU per call (median over rounds), worst loss, connect and echo delay
    pooled over the rounds' calls; the ratio; then the criteria."""
    by_n: dict[str, Any] = {}
    for n in cfg.sessions:
        row: dict[str, Any] = {}
        for name in SERVERS:
            mine = [t for t in trials if t["server"] == name and t["sessions"] == n]
            if mine:
                row[name] = server_figures(mine)
        if RTCEDGE in row and JANUS in row:
            r, j = row[RTCEDGE]["cpu_per_call_pct"], row[JANUS]["cpu_per_call_pct"]
            row["cpu_ratio"] = r / j if j and math.isfinite(r) and math.isfinite(j) else None
        if row:
            by_n[str(n)] = row
    return {"by_n": by_n, "criteria": criteria(by_n)}


def server_figures(trials: list[dict[str, Any]]) -> dict[str, Any]:
    calls = [c for t in trials for c in t["calls"]]
    per_call = [t["cpu_per_call_pct"] for t in trials if math.isfinite(_num(t["cpu_per_call_pct"]))]
    parts: dict[str, list[float]] = collections.defaultdict(list)
    for t in trials:
        for part, pct in t["parts_cpu_pct"].items():
            parts[part].append(pct / t["sessions"])
    losses = [t["frame_loss_pct"]["worst"] for t in trials if t["frame_loss_pct"]]
    delays = sorted(_values(calls, "echo_delay_ms"))
    return {
        "rounds": len(trials),
        "ok": all(t["ok"] for t in trials),
        "cpu_per_call_pct": statistics.median(per_call) if per_call else math.nan,
        "cpu_per_call_rounds_pct": per_call,
        "parts_per_call_pct": {part: statistics.median(v) for part, v in parts.items()},
        "worst_loss_pct": max(losses) if losses else math.nan,
        "connect_ms": spread_ms(_values(calls, "offer_to_connected_s")),
        "echo_delay_ms": {"p50": percentile(delays, 0.5), "p95": percentile(delays, 0.95)},
        "echo_frames": sum(t["echo_frames"] for t in trials),
    }


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def criteria(by_n: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 26's criteria this benchmark measures, where their N was run by both servers."""
    out = []
    both = {int(n): row for n, row in by_n.items() if RTCEDGE in row and JANUS in row}
    if CPU_RATIO_N in both and both[CPU_RATIO_N].get("cpu_ratio") is not None:
        ratio = both[CPU_RATIO_N]["cpu_ratio"]
        out.append(
            {
                "name": f"CPU per call at N={CPU_RATIO_N}: rtcedge (relay + transceiver) <= "
                f"{MAX_CPU_RATIO:g} x Janus (stretch 1.0)",
                "pass": ratio <= MAX_CPU_RATIO,
                "detail": f"{ratio:.2f} x ({both[CPU_RATIO_N][RTCEDGE]['cpu_per_call_pct']:.2f} % "
                f"against {both[CPU_RATIO_N][JANUS]['cpu_per_call_pct']:.2f} % of a core per call)",
            }
        )
    for n in DELAY_NS:
        if n not in both:
            continue
        r, j = both[n][RTCEDGE]["echo_delay_ms"], both[n][JANUS]["echo_delay_ms"]
        ok = (
            _num(r["p50"]) <= _num(j["p50"]) + DELAY_P50_MARGIN_MS
            and _num(r["p95"]) <= _num(j["p95"]) + DELAY_P95_MARGIN_MS
        )
        out.append(
            {
                "name": f"opus echo delay at N={n}: p50 <= Janus's + {DELAY_P50_MARGIN_MS:g} ms, "
                f"p95 <= Janus's + {DELAY_P95_MARGIN_MS:g} ms",
                "pass": ok,
                "detail": f"rtcedge {_f(r['p50'])}/{_f(r['p95'])} ms, Janus {_f(j['p50'])}/"
                f"{_f(j['p95'])} ms (p50/p95)",
            }
        )
    if both:
        largest = {
            name: max((n for n, row in both.items() if row[name]["ok"]), default=0)
            for name in SERVERS
        }
        out.append(
            {
                "name": "calls per core: the largest N passed (every call < 1 % loss, echo delay "
                "p95 <= 60 ms), rtcedge >= Janus",
                "pass": largest[RTCEDGE] >= largest[JANUS] > 0,
                "detail": f"rtcedge {largest[RTCEDGE]}, Janus {largest[JANUS]} (of N = "
                f"{', '.join(map(str, sorted(both)))})",
            }
        )
    return out


# -- report ----------------------------------------------------------------------------------------
def _f(value: Any, pattern: str = "{:.0f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return pattern.format(value)


HEADER = (
    f"{'N':>4} {'server':<8}{'rd':>3} {'conn':>4} {'connect ms':^11} {'echo dly ms':^11} "
    f"{'loss %':^11} {'server':>6} {'/call':>6} {'thr':>4} {'callers':>7} {'others':^9}\n"
    f"{'':>4} {'':<8}{'':>3} {'':>4} {'p50/p95':^11} {'p50/p95':^11} {'med/worst':^11} "
    f"{'%core':>6} {'%core':>6} {'':>4} {'%core':>7} {'srv/clt':^9}"
)


def trial_line(t: dict[str, Any], judged: bool = True) -> str:
    """One trial as a table row; a quick run (2 s, one frame is 1 %) shows no verdict."""
    c, d, loss = t["connect_ms"], t["echo_delay_ms"], t["frame_loss_pct"]
    return (
        f"{t['sessions']:>4} {t['server']:<8}{t['round']:>3} {t['connected']:>4} "
        f"{_f(c.get('p50')):>5}/{_f(c.get('p95')):<5} {_f(d.get('p50')):>5}/{_f(d.get('p95')):<5} "
        f"{_f(loss.get('median'), '{:.2f}'):>5}/{_f(loss.get('worst'), '{:.2f}'):<5} "
        f"{_f(t['server_cpu_pct'], '{:.1f}'):>6} {_f(t['cpu_per_call_pct'], '{:.2f}'):>6} "
        f"{t['server_threads']:>4} {_f(t['callers_cpu_pct']):>7} "
        f"{_f(t['others_on_server_core_pct']):>4}/{_f(t['others_on_callers_cores_pct']):<4} "
        + (
            ("ok" if t["ok"] else f"FAIL: {t['stop_reason']}")
            if judged
            else "(quick run: not judged)"
        )
    )


SUMMARY_HEADER = (
    f"{'N':>4} {'CPU per call, % of a core':^33} {'ratio':>6} {'worst loss %':^13} "
    f"{'connect p50/p95 ms':^19} {'echo delay p50/p95 ms':^21}\n"
    f"{'':>4} {'rtcedge (trx alone)':>20} {'Janus':>12} {'r/J':>6} {'r / J':^13} "
    f"{'r | J':^19} {'r | J':^21}"
)


def summary_line(n: str, row: dict[str, Any]) -> str:
    r, j = row.get(RTCEDGE, {}), row.get(JANUS, {})

    def pair(d: dict[str, Any], key: str) -> str:
        v = d.get(key, {})
        return f"{_f(v.get('p50'))}/{_f(v.get('p95'))}"

    trx = r.get("parts_per_call_pct", {}).get("transceiver")
    return (
        f"{n:>4} {_f(r.get('cpu_per_call_pct'), '{:.2f}'):>12} ({_f(trx, '{:.2f}'):>5}) "
        f"{_f(j.get('cpu_per_call_pct'), '{:.2f}'):>12} {_f(row.get('cpu_ratio'), '{:.2f}'):>6} "
        f"{_f(r.get('worst_loss_pct'), '{:.2f}'):>6}/{_f(j.get('worst_loss_pct'), '{:.2f}'):<6} "
        f"{pair(r, 'connect_ms'):>9}|{pair(j, 'connect_ms'):<9} "
        f"{pair(r, 'echo_delay_ms'):>10}|{pair(j, 'echo_delay_ms'):<10}"
    )


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    loops = cfg["janus_event_loops"] or "0 (its default: a loop and thread per handle)"
    echo("")
    echo(
        f"peer: rtcedge's opus echo (relay + transceiver) and Janus's EchoTest, each on CPU "
        f"{result['cpus']['server']}, callers on CPU {result['cpus']['clients']}; window "
        f"{cfg['window_s']:g} s, {cfg['rounds']} round(s) per N, a fresh server per trial; "
        f"Janus event loops {loops}, over veth {result['link']['host']} -> "
        f"{result['link']['peer']}"
    )
    echo(HEADER)
    for t in result["trials"]:
        echo(trial_line(t, judged=not cfg["quick"]))
    for t in result["trials"]:
        if t["errors"]:
            errors = "; ".join(t["errors"])
            echo(f"{t['server']} N={t['sessions']} round {t['round']} errors: {errors}")
    echo("")
    echo(SUMMARY_HEADER)
    for n, row in result["summary"]["by_n"].items():
        echo(summary_line(n, row))
    echo("")
    echo(
        "CPU per call: the server's CPU time over the window (all threads of all its "
        "processes, /proc/<pid>/task/*/schedstat) / N, median over the rounds; rtcedge's is "
        "relay + transceiver (the transceiver alone in brackets). echo delay: arrival - due "
        "send time of the frame each echo frame is, per call, p50/p95 over every call of the "
        "rounds. others srv/clt: busy time of the server's / the callers' CPUs none of ours used."
    )
    for c in result["summary"]["criteria"]:
        echo(f"{verdict(c['pass'], cfg['quick'])} {c['name']}: {c['detail']}")
    for note in result["notes"]:
        echo(f"note: {note}")


EXAMPLES = """
\b
Examples:
  rtcedge bench peer                                 # N = 10, 20, 40, 80; 2 rounds
  rtcedge bench sessions --reference janus --sessions 10,40 --seconds 10
  rtcedge bench peer --janus-event-loops 1           # Janus with one shared event loop
  rtcedge bench peer --quick                         # smoke test: N = 2, 2 s window
\b
Needs janus (apt-get install janus) and root: Janus runs in a network namespace of the
benchmark's own, reached over a veth pair with a private /30 (Janus gathers no candidate on
loopback). Prints a line per trial as it goes, then per N both servers' figures and issue 26's
criteria (a --quick run does not judge them). Writes the JSON result and its plot; exits 0
whatever the figures are.
"""


@click.command("peer", epilog=EXAMPLES)
@click.option(
    "--reference",
    type=click.Choice([JANUS]),
    default=JANUS,
    show_default=True,
    help="The C media server measured beside rtcedge: Janus Gateway's EchoTest.",
)
@click.option(
    "--sessions",
    "sessions",
    default="10,20,40,80",
    show_default=True,
    callback=parse_sessions,
    help="Concurrent calls per trial, increasing.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1, max=5),
    default=2,
    show_default=True,
    help="Trials per server and N, alternating which server goes first.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.5, max=120),
    default=10.0,
    show_default=True,
    help="Measured window of a trial.",
)
@click.option(
    "--janus-event-loops",
    type=click.IntRange(min=0, max=64),
    default=0,
    show_default=True,
    help="Janus's event_loops: 0, its default, a loop and thread per handle; N shared loops.",
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
    type=click.FloatRange(min=30, max=7200),
    default=1800.0,
    show_default=True,
    help="Deadline of the whole run; trials that would not fit are skipped.",
)
@out_option
@click.option("--quick", is_flag=True, help="N = 2, one round, 2 s window: a smoke test.")
def peer_bench(
    reference: str,
    sessions: tuple[int, ...],
    rounds: int,
    seconds: float,
    janus_event_loops: int,
    calls_per_worker: int,
    max_seconds: float,
    out_dir: str,
    quick: bool,
) -> None:
    """rtcedge's opus echo beside Janus's EchoTest: CPU per call, loss, connect, echo delay."""
    common = {
        "reference": reference,
        "janus_event_loops": janus_event_loops,
        "calls_per_worker": calls_per_worker,
        "out_dir": out_dir,
    }
    if quick:
        cfg = PeerConfig(
            sessions=(2,),
            rounds=1,
            window_s=2.0,
            settle_s=1.0,
            idle_s=0.5,
            max_seconds=min(max_seconds, 120.0),
            quick=True,
            **common,
        )
    else:
        cfg = PeerConfig(
            sessions=sessions, rounds=rounds, window_s=seconds, max_seconds=max_seconds, **common
        )
    run_and_report("peer", lambda: run(cfg), print_report, cfg.out_dir, peer_figure)


if __name__ == "__main__":
    peer_bench()
