"""``rtcedge bench recovery``: the audio gap a real WebRTC caller hears when parts fail.

One aiortc caller talks through a relay to a transceiver (echo backend) for the whole run and
timestamps every loud echo frame it receives. Each trial does one thing to the path, and its gap
is the longest silence between two echo frames around that moment, minus the 20 ms a frame lasts:

- ``worker``: the relay worker carrying the call is killed with SIGKILL (the supervisor restarts
  it on the same sockets with its flow journal);
- ``relay-redis`` / ``relay-no-redis``: the whole relay process is replaced by a new one with
  another internal address (the new one binds the same public port first, then the old one is
  killed), with and without the Redis flow cache;
- ``path``: a load balancer in front (a loopback proxy) steers the caller's packets to another
  node's relay (started for the trial, on another port) while the old one stays up; the new one
  restores the flow from Redis and the transceiver must answer along the newest path.
- ``scale-down``: several callers, three transceivers behind a round-robin front; the one
  carrying the calls gets SIGTERM and its callers move (``bench.scaledown``): one gap per
  moved caller per trial.

Targets: worker <= 50 ms p95; relay with Redis <= 200 ms p95, without <= 6 s
(the caller's next ICE consent check); scale-down <= 250 ms p95. Bounded: every wait has a
deadline; all on 127.0.0.1.
``relay-redis`` and ``path`` need ``redis-server``: without it they are skipped with a note.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import click

from bench.harness.cli import Echo, out_option, run_and_report, run_async
from bench.harness.prerequisites import REDIS_SERVER
from bench.harness.progress import Progress
from bench.harness.stats import percentile_nearest_index
from bench.harness.verdict import verdict
from bench.plots.recovery import recovery_figure
from bench.scaledown import run_scale_down
from testbed.callers import EchoCaller, loopback_only
from testbed.nat import NatProxy
from testbed.processes import RedisServer, RelayProcess, TransceiverProcess, sessions_ended

# ``path`` has no target of its own; it restores the flow from Redis like ``relay-redis``.
TARGETS_MS = {"worker": 50, "relay-redis": 200, "relay-no-redis": 6000, "scale-down": 250}
# Pause after a trial. Without Redis each replacement breaks the path for a few seconds, and the
# transceiver's own consent checks (RFC 7675; aioice: every 4-6 s, never retransmitted, six
# failures in a row end the call) fail meanwhile: back-to-back outages would expire consent,
# which no real roll-out does. One clean consent round between trials keeps trials independent.
SETTLE_S = {"relay-no-redis": 6.5}
RUN_DEADLINE_S = 900.0
# A-priori durations for the progress estimate (rough figures from runs on two shared cores):
# starting a scenario's call, and one trial with its settle time. The estimate then follows the
# pace of the trials already done.
SCENARIO_START_S = 4.0
TRIAL_S = {
    "baseline": 1.5,
    "worker": 2.5,
    "relay-redis": 3.0,
    "relay-no-redis": 13.0,
    "path": 3.0,
    "scale-down": 5.0,
}


# -- the trials: one event each, its gap in ms -----------------------------------------------------
@dataclass
class CallPath:
    """What a trial acts on: the call, the relays (the last one carries the call; a trial may
    start another), the load balancer in front (``path`` only) and Redis (None: without)."""

    caller: EchoCaller
    relays: list[RelayProcess]
    proxy: NatProxy | None
    redis_url: str | None

    @property
    def relay(self) -> RelayProcess:
        return self.relays[-1]

    def another_relay(self, same_port: bool) -> tuple[RelayProcess, RelayProcess]:
        """(the relay carrying the call, a new one for the same transceivers and keyring): a
        replacement on the same public port, or another node's on a port of its own. The new
        one is stopped with the others after the scenario, whatever happens."""
        old = self.relay
        new = RelayProcess(
            dict(old.transceivers),
            workers=old.workers,
            keyring=old.keyring,
            cluster=old.cluster,
            extra_env={"RTCEDGE_REDIS_URL": self.redis_url} if self.redis_url else {},
        )
        if same_port:
            new.port = old.port
            # The old relay may still run: the new one replaces it on purpose.
            new.extra_args.append("--takeover")
        self.relays.append(new)
        return old, new


async def busiest_worker(relay: RelayProcess) -> int:
    """The worker whose client-to-transceiver counter moves: the one carrying the call.

    Waits with ``asyncio.sleep``: the caller shares this event loop, and a blocked loop would
    itself open an audio gap (and then a burst) right before the trial.
    """
    before = [relay.metric("rtcedge_relay_packets_total", worker=str(w)) for w in range(2)]
    await asyncio.sleep(1.2)  # counters are published once a second
    after = [relay.metric("rtcedge_relay_packets_total", worker=str(w)) for w in range(2)]
    return max(range(2), key=lambda w: after[w] - before[w])


async def trial_baseline(path: CallPath) -> float:
    """Nothing happens: the longest gap of an undisturbed call over the same window."""
    at = time.monotonic()
    await asyncio.sleep(1.0)
    return path.caller.echo.gap_ms(at - 0.5, time.monotonic())


async def trial_worker(path: CallPath) -> float:
    worker = await busiest_worker(path.relay)
    pid = path.relay.worker_pids()[worker]
    at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    await path.caller.wait_for_echo(at, 5)
    await asyncio.sleep(0.5)
    return path.caller.echo.gap_ms(at - 0.5, time.monotonic())


async def trial_replace(path: CallPath) -> float:
    # The new relay joins the public port's SO_REUSEPORT group as soon as it binds, and the
    # kernel may move the call to it right then: the window opens before it starts.
    begin = time.monotonic()
    old, new = path.another_relay(same_port=True)
    await asyncio.to_thread(new.start)  # off the caller's loop: starting takes ~a second
    await asyncio.sleep(0.3)
    at = time.monotonic()
    assert old.proc is not None
    for pid in old.worker_pids():
        os.kill(pid, signal.SIGKILL)
    old.proc.kill()
    old.proc.wait()
    ok = await path.caller.wait_for_echo(at, 10)
    await asyncio.sleep(0.5)
    return path.caller.echo.gap_ms(begin - 0.3, time.monotonic()) if ok else 10_000.0


async def trial_path(path: CallPath) -> float:
    """The caller's packets now reach another node's relay, which has never seen the call."""
    assert path.proxy is not None and path.redis_url is not None
    old, new = path.another_relay(same_port=False)
    await asyncio.to_thread(new.start)
    await asyncio.sleep(0.3)
    at = time.monotonic()
    path.proxy.upstream = new.address
    await path.caller.wait_for_echo(at, 5)
    await asyncio.sleep(0.5)
    gap = path.caller.echo.gap_ms(at - 0.5, time.monotonic())
    await asyncio.to_thread(old.stop)  # the node left behind, still up during the trial
    return gap


TRIALS: dict[str, Callable[[CallPath], Awaitable[float]]] = {
    "baseline": trial_baseline,
    "worker": trial_worker,
    "relay-redis": trial_replace,
    "relay-no-redis": trial_replace,
    "path": trial_path,
}
SCENARIOS = (*TRIALS, "scale-down")  # scale-down runs a fleet of its own: bench.scaledown
NEEDS_REDIS = ("relay-redis", "path")
QUICK_SCENARIOS = ("worker", "relay-redis", "path")  # the fast ones, one trial each


# -- a scenario: one call, its trials --------------------------------------------------------------
async def run_scenario(
    scenario: str,
    trials: int,
    redis_url: str | None,
    stock_jitter_buffer: bool,
    progress: Progress,
) -> tuple[list[float], dict[str, float], dict[str, Any]]:
    """Start a relay (2 workers), a transceiver and one caller; run the trials; stop them all.
    Returns the gaps and the transceiver's ended-session counts by reason."""
    if scenario == "scale-down":
        return await run_scale_down(trials, stock_jitter_buffer, progress)
    relay = RelayProcess(
        {}, workers=2, extra_env={"RTCEDGE_REDIS_URL": redis_url} if redis_url else {}
    )
    # ``path``: a proxy in front plays the load balancer that steers the caller's packets to
    # another node's relay.
    proxy = NatProxy(relay.address) if scenario == "path" else None
    trx = TransceiverProcess(relay, advertise=proxy.address if proxy else None)
    relay.transceivers = {0: trx.media_address}
    if proxy is not None:
        proxy.start()
    path = CallPath(EchoCaller(stock_jitter_buffer), [relay], proxy, redis_url)
    gaps: list[float] = []
    try:
        relay.start()
        trx.start()
        await path.caller.connect(trx.url)
        await asyncio.sleep(1.0)
        for i in range(trials):
            gaps.append(await TRIALS[scenario](path))
            await asyncio.sleep(SETTLE_S.get(scenario, 0.5))
            progress.step(f"{scenario} trial {i + 1}/{trials}: gap {gaps[-1]:.0f} ms")
        return gaps, sessions_ended(trx), {}
    finally:
        await path.caller.pc.close()
        trx.stop(timeout_s=5)
        for started in path.relays:
            started.stop()
        if proxy is not None:
            proxy.close()


def summarize(
    name: str,
    trials: int,
    gaps: list[float],
    ended: dict[str, float],
    stock_jitter_buffer: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A scenario's gaps against its target (``extra``: what a scenario adds to its result)."""
    p95 = percentile_nearest_index(sorted(gaps), 0.95)
    target = TARGETS_MS.get(name)
    return {
        "trials": trials,
        "gap_ms": [round(g, 1) for g in gaps],
        "p50_ms": round(statistics.median(gaps), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(max(gaps), 1),
        "target_p95_ms": target,
        "pass": target is None or p95 <= target,
        "sessions_ended_during_trials": ended,
        "caller_jitter_buffer": "aiortc" if stock_jitter_buffer else "rtcedge",
        **(extra or {}),
    }


def runnable(scenarios: tuple[str, ...], echo: Echo) -> dict[str, str]:
    """Before anything starts: the scenarios that cannot run here, and why (said at once).
    Without redis-server those that need it are skipped; if that leaves none, the run stops."""
    needing = [name for name in scenarios if name in NEEDS_REDIS]
    if not needing or REDIS_SERVER.found():
        return {}
    if len(needing) == len(scenarios):
        REDIS_SERVER.require(f"the recovery scenario(s) {', '.join(needing)}")
    note = REDIS_SERVER.missing_note(f"the scenario(s) {', '.join(needing)}")
    echo(f"note: {note}")
    return dict.fromkeys(needing, note)


async def run_bench(
    trials: int,
    scenarios: tuple[str, ...] = SCENARIOS,
    stock_jitter_buffer: bool = False,
    skipped: dict[str, str] | None = None,
    echo: Echo = click.echo,
    quick: bool = False,
) -> dict[str, Any]:
    """Every scenario in turn but the ``skipped`` ones, with one Redis for those that use it
    (when there is one): the result, by scenario."""
    loopback_only()
    skipped = skipped or {}
    to_run = [name for name in scenarios if name not in skipped]
    progress = Progress(
        [TRIAL_S[name] + (SCENARIO_START_S if i == 0 else 0.0)
         for name in to_run for i in range(trials)],
        echo,
        quick,
    )  # fmt: skip
    progress.announce(f"{trials} trial(s) of {', '.join(to_run)}")
    result: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        rds = stack.enter_context(RedisServer()) if REDIS_SERVER.found() else None
        for name in scenarios:
            if name in skipped:
                result[name] = {"skipped": skipped[name]}
                continue
            redis_url = rds.url if rds is not None and name != "relay-no-redis" else None
            gaps, ended, extra = await run_scenario(
                name, trials, redis_url, stock_jitter_buffer, progress
            )
            result[name] = summarize(name, trials, gaps, ended, stock_jitter_buffer, extra)
    return result


def print_report(result: dict[str, Any], echo: Echo, quick: bool = False) -> None:
    echo("")
    echo(
        f"{'scenario':16} {'trials':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'target':>8}"
        "  result"
    )
    for name, s in result.items():
        if "skipped" in s:
            echo(f"{name:16} skipped: {s['skipped']}")
            continue
        word = "-" if s["target_p95_ms"] is None else verdict(s["pass"], quick)
        echo(
            f"{name:16} {s['trials']:>6} {s['p50_ms']:>8} {s['p95_ms']:>8} {s['max_ms']:>8} "
            f"{s['target_p95_ms'] or '-':>8}  {word}"
        )
        if "moves" in s:
            echo(f"{'':16} {s['callers']} callers, {s['transceivers']} transceivers; "
                 f"moves: {s['moves']}")  # fmt: skip


EXAMPLES = """
\b
Examples:
  rtcedge bench recovery                     # 10 trials of every scenario (a few minutes)
  rtcedge bench recovery --scenario worker --trials 20
  rtcedge bench recovery --quick             # smoke test: 1 trial of worker, relay-redis, path
  rtcedge bench recovery --scenario scale-down   # 10 SIGTERMs of the transceiver carrying calls
\b
Prints a line per trial as it goes, then a table of gaps against the p95 targets (a --quick
run does not judge them), writes the JSON result, and exits 0 whatever the figures are.
relay-redis and path need redis-server (apt-get install redis-server): without it they are
skipped with a note.
"""


@click.command("recovery", epilog=EXAMPLES)
@click.option(
    "--trials",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="Events of each scenario (one gap measured per event).",
)
@out_option
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(SCENARIOS),
    help="Run only these (repeatable) [default: all].",
)
@click.option(
    "--stock-jitter-buffer",
    is_flag=True,
    help="Give the caller aiortc's own audio jitter buffer (stalls ~300 ms after a loss).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="1 trial of worker, relay-redis and path (unless --scenario): a smoke test.",
)
def recovery_bench(
    trials: int,
    out_dir: str,
    scenarios: tuple[str, ...],
    stock_jitter_buffer: bool,
    quick: bool,
) -> None:
    """Audio gap a real caller hears when a worker, a relay or the path fails over, or when its
    transceiver is scaled down and the call moves."""
    if quick:
        trials, scenarios = 1, scenarios or QUICK_SCENARIOS
    scenarios = scenarios or SCENARIOS
    skipped = runnable(scenarios, click.echo)

    def measure() -> dict[str, Any]:
        bench = run_bench(trials, scenarios, stock_jitter_buffer, skipped, quick=quick)
        return run_async(bench, RUN_DEADLINE_S)

    report = functools.partial(print_report, quick=quick)
    run_and_report("recovery", measure, report, out_dir, recovery_figure, quick=quick)


if __name__ == "__main__":
    recovery_bench()
