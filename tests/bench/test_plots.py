"""Every benchmark's plot: ``rtcedge bench plot`` re-draws it from a result file, whatever the
run measured (figures not measured, references or scenarios skipped, steps that failed, results
written before the latency distribution was recorded); and without matplotlib a run still writes
its JSON and says in one line how to get the plot, and ``bench plot`` fails with that hint.

The quick-run smoke tests beside this file check the plot each benchmark draws after a real run.
Behaviour, not pixels: a PNG of a readable size with more than a blank canvas in it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from bench.harness.plots import PLOT_EXTRA
from bench.harness.results import finite
from bench.latency import LatencyResult
from bench.sessions_step import Step
from rtcedge.cli import main
from tests.support.bench_output import assert_png

HEADER = {
    "started_utc": "2026-12-01T10:00:00+00:00",
    "host": {"cpus_allowed": [0, 1], "kernel": "6.1", "python": "3.11.7"},
}
NO_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None  # as if not installed\n"


def relay_variant(cpu_us: float, counted: list[bool]) -> dict[str, Any]:
    windows = [
        {"packets_per_s": 1e6 / cpu_us + r, "cpu_us_per_packet": cpu_us, "counted": c}
        for r, c in enumerate(counted)
    ]
    spread = {"median": cpu_us, "min": cpu_us * 0.98, "max": cpu_us * 1.02, "n": len(windows)}
    pps = {"median": 1e6 / cpu_us, "min": 1e6 / spread["max"], "max": 1e6 / spread["min"]}
    pps["n"] = len(windows)
    return {"summary": {"packets_per_s": pps, "cpu_us_per_packet": spread}, "windows": windows}


def relay_result(with_distribution: bool) -> dict[str, Any]:
    paths = {
        name: asdict(
            LatencyResult(
                name, 4000, 0, p50, p50 * 1.3, p50 * 9, added, [p50 + q for q in range(101)]
            )
        )
        for name, p50, added in (("direct", 8.0, None), ("plain", 62.0, 54.0), ("relay", 63.0, 55))
    }
    if not with_distribution:  # results written before the distribution was recorded
        for path in paths.values():
            del path["percentiles_us"]
    return {
        "benchmark": "relay_pps",
        **HEADER,
        "config": {"flows": 64, "payload_bytes": 172, "workers": 1, "rounds": 2, "window_s": 1.0},
        "variants": {
            "relay": relay_variant(3.1, [True, False]),
            "plain": relay_variant(4.0, [True, True]),
            "nginx": {"skipped": "nginx not found on PATH"},
        },
        "ratios": {"relay/plain": {"median": 0.77, "min": 0.76, "max": 0.78, "n": 2}},
        "latency": {"rate_pps": 2000, "seconds": 2.0, "paths": paths},
    }


def sessions_step(n: int, attempt: int, loss_pct: list[float], ok: bool) -> dict[str, Any]:
    """A step as the benchmark records it (unmeasured figures None), with its calls' losses."""
    step = Step(n, attempt=attempt, connected=len(loss_pct), ok=ok)
    if loss_pct:
        step.frame_loss_pct = {"median": statistics.median(loss_pct), "worst": max(loss_pct)}
        step.connect_ms = {"p50": 40.0 + n, "p95": 50.0 + n, "n": len(loss_pct)}
        step.first_echo_ms = {"p50": 60.0 + n, "p95": 70.0 + n, "n": len(loss_pct)}
        step.transceiver_cpu_pct = 3.0 * n
        step.cpu_per_session_pct = 3.0
        step.clients_cpu_pct = 2.0 * n
        step.relay_cpu_pct = 0.5 * n
    step.calls = [{"frame_loss_pct": loss} for loss in loss_pct]
    return finite(asdict(step))


def sessions_result() -> dict[str, Any]:
    return {
        "benchmark": "sessions",
        **HEADER,
        "config": {"window_s": 10.0, "max_loss_pct": 1.0, "quick": False},
        "steps": [
            sessions_step(5, 1, [0.0, 0.1, 0.0, 0.05, 0.0], ok=True),
            sessions_step(10, 1, [0.0] * 9 + [3.0], ok=False),
            sessions_step(10, 2, [0.1] * 10, ok=True),
            sessions_step(30, 1, [], ok=False),  # nothing connected: nothing measured
        ],
    }


def recovery_result() -> dict[str, Any]:
    def scenario(gaps: list[float], target: float | None) -> dict[str, Any]:
        return {
            "trials": len(gaps),
            "gap_ms": gaps,
            "p50_ms": sorted(gaps)[len(gaps) // 2],
            "p95_ms": max(gaps),
            "target_p95_ms": target,
            "pass": True,
            "sessions_ended_during_trials": {},
            "caller_jitter_buffer": "rtcedge",
        }

    return {
        "baseline": scenario([2.1, 0.0, 3.5], None),
        "worker": scenario([7.9, 20.8, 12.0], 50),
        "relay-redis": {"skipped": "redis-server not found (apt-get install redis-server)"},
        "relay-no-redis": scenario([2560.0, 3079.0, 2900.0], 6000),
        "path": scenario([20.2], None),
    }


def connect_result(with_phases: bool) -> dict[str, Any]:
    """A connect run; without phases: a transceiver that had no connect_phase histogram (before
    it existed), and a memory step skipped (no slope)."""

    def call(i: int, connected: float | None) -> dict[str, Any]:
        return {
            "id": i,
            "offer_to_answer_s": 0.004,
            "offer_to_ice_s": 0.007,
            "offer_to_connected_s": connected,
            "offer_to_first_echo_s": None if connected is None else connected + 0.02,
        }

    ms = {"p50": 5.0, "p95": 9.0, "n": 3}
    phases = {"offer": 0.6, "answer": 2.1, "first_check": 3.0, "ice": 1.2, "dtls": 2.5}
    single = {"name": "single", "calls": [call(i, 0.012) for i in range(3)], "errors": []}
    single["ms"] = dict.fromkeys(
        ("post_to_answer", "answer_to_ice", "ice_to_connected", "connected_to_first_echo"), ms
    )
    single["transceiver_phases_ms"] = phases if with_phases else dict.fromkeys(phases)
    burst = {"name": "burst", "calls": [call(i, 0.1 + i / 100) for i in range(4)]}
    burst["calls"].append(call(9, None))  # one did not connect
    points = [{"calls": 0, "sessions_active": 0, "rss_mb": 80.0}]
    if with_phases:
        points.append({"calls": 4, "sessions_active": 4, "rss_mb": 81.2})
    return {
        "benchmark": "connect",
        **HEADER,
        "config": {"quick": not with_phases},
        "stages": [single, burst],
        "memory": {"points": points, "mb_per_call": 0.3 if with_phases else None},
    }


def turn_result() -> dict[str, Any]:
    """A turn run: a step of split turns (one missing a moment), and one that split none."""
    parts = {"vad_wait": 600.0, "recognition": 700.0, "synthesis": 30.0, "transport": 5.0}
    parts["agent_waits"] = 40.0
    split = {"call": 0, "turn": 1, "parts_ms": parts, "total_ms": sum(parts.values())}
    spread = {"p50": 600.0, "p95": 650.0, "max": 650.0, "n": 2}
    summary = {"parts_ms": dict.fromkeys(parts, spread), "total_ms": spread}
    steps = [
        {"calls": 1, "summary": summary, "turns": [split, {**split, "turn": 2}]},
        {"calls": 3, "summary": {}, "turns": [{"call": 0, "turn": 1, "missing": "decided"}]},
    ]
    return {"benchmark": "turn", **HEADER, "config": {"quick": False}, "steps": steps}


def peer_result() -> dict[str, Any]:
    """A peer run: N=10 both servers (one rtcedge round failed), N=40 Janus only (rtcedge was
    dropped), a figure not measured (None)."""

    def trial(server: str, n: int, round_: int, per_call: float | None, ok: bool) -> dict:
        loss = {"median": 0.1, "worst": 1.2 if not ok else 0.2}
        calls = [{"frame_loss_pct": loss["worst"], "echo_delay_ms": 5.0 + i} for i in range(3)]
        return {"server": server, "sessions": n, "round": round_, "ok": ok,
                "cpu_per_call_pct": per_call, "frame_loss_pct": loss, "calls": calls}  # fmt: skip

    def figures(per_call: float | None, trx: float | None = None) -> dict[str, Any]:
        return {"cpu_per_call_pct": per_call, "worst_loss_pct": 0.2,
                "parts_per_call_pct": {"transceiver": trx} if trx else {"janus": per_call},
                "echo_delay_ms": {"p50": 3.0, "p95": None}}  # fmt: skip

    trials = [
        trial("rtcedge", 10, 1, 1.1, True),
        trial("janus", 10, 1, 0.43, True),
        trial("janus", 10, 2, 0.44, True),
        trial("rtcedge", 10, 2, 1.1, False),
        trial("janus", 40, 1, None, True),
    ]
    by_n = {
        "10": {"rtcedge": figures(1.1, 0.72), "janus": figures(0.43), "cpu_ratio": 2.56},
        "40": {"janus": figures(None)},
    }
    return {"benchmark": "peer", **HEADER, "config": {"quick": False, "window_s": 10.0,
            "rounds": 2}, "trials": trials, "summary": {"by_n": by_n}}  # fmt: skip


RESULTS = {
    "peer-20261204T100000Z.json": peer_result(),
    "turn-20261204T100000Z.json": turn_result(),
    "connect-20261202T100000Z.json": connect_result(with_phases=True),
    "connect-20261202T110000Z.json": connect_result(with_phases=False),
    "relay_pps-20261201T100000Z.json": relay_result(with_distribution=True),
    "relay_pps-20261130T100000Z.json": relay_result(with_distribution=False),
    "sessions-20261201T100000Z.json": sessions_result(),
    "recovery-20261201T100000Z.json": recovery_result(),
}


def write(tmp_path: Path, name: str, result: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return path


def test_bench_plot_draws_every_kind_of_result_beside_its_json(tmp_path: Path) -> None:
    files = [write(tmp_path, name, result) for name, result in RESULTS.items()]
    run = CliRunner().invoke(main, ["bench", "plot", *map(str, files)])
    assert run.exit_code == 0, run.output
    for path in files:
        png = path.with_suffix(".png")
        assert f"plot: {png}" in run.output
        assert_png(png)


def test_bench_plot_names_a_file_that_is_no_benchmark_result(tmp_path: Path) -> None:
    good = write(tmp_path, "recovery-20261201T100000Z.json", recovery_result())
    other = write(tmp_path, "notes-1.json", {"hello": 1})
    run = CliRunner().invoke(main, ["bench", "plot", str(good), str(other)])
    assert run.exit_code == 2, run.output
    assert "notes-1.json" in run.output and "relay_pps" in run.output
    assert not good.with_suffix(".png").exists(), "every file is checked before any is drawn"


def run_without_matplotlib(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_MATPLOTLIB + code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_matplotlib_a_run_writes_its_json_and_says_how_to_get_the_plot(
    tmp_path: Path,
) -> None:
    """The end every benchmark command shares (bench/harness/cli.py), with a run's result."""
    result = recovery_result()
    proc = run_without_matplotlib(
        "import json\n"
        "from bench.harness.cli import run_and_report\n"
        "from bench.plots.recovery import recovery_figure\n"
        f"result = json.loads({json.dumps(json.dumps(result))})\n"
        f"run_and_report('recovery', lambda: result, lambda r, echo: echo('report'), "
        f"{str(tmp_path)!r}, recovery_figure)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    [written] = tmp_path.glob("recovery-*.json")
    assert json.loads(written.read_text()) == result
    assert not list(tmp_path.glob("*.png"))
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["report", f"results: {written}"], proc.stdout
    assert len(lines) == 3 and PLOT_EXTRA in lines[2], proc.stdout


def test_without_matplotlib_bench_plot_fails_with_the_install_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "recovery-20261201T100000Z.json", recovery_result())
    proc = run_without_matplotlib(
        f"from rtcedge.cli import main\nmain(['bench', 'plot', {str(path)!r}])\n"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert PLOT_EXTRA in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not path.with_suffix(".png").exists()
