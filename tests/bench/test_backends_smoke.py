"""Smoke test of the backends benchmark through issue 24's command, ``rtcedge bench sessions
--backend NAME``: ``--quick`` (one call, a 3 s window) for the native WebSocket and the Media
Streams backends, each against its stand-in and then its echo reference at its rate, in one run
(and the gRPC backend in a run of its own: its wire is HTTP/2, read by another framing);
the result's structure, not its values: both directions timed, every marker matched, CPU
figures present, each backend paired with its own reference.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

BACKENDS = ("websocket", "media-streams")
ORDER = ["websocket", "echo-24000", "media-streams", "echo-8000"]  # a rate's, then its echo


def number(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_quick_run_times_each_backend_both_ways_against_its_echo(tmp_path: Path) -> None:
    args = ["bench", "sessions", *(a for b in BACKENDS for a in ("--backend", b))]
    code, stdout, stderr = run_benchmark("rtcedge", [*args, "--quick", "--out", str(tmp_path)], 240)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert_quick_run_output(stdout, steps=4)
    (path,) = tmp_path.glob("backends-*.json")
    assert_plot_beside(path, stdout)
    result = json.loads(path.read_text())
    steps = {s["backend"]: s for s in result["steps"]}
    assert [s["backend"] for s in result["steps"]] == ORDER
    for step in steps.values():
        assert step["ok"] and step["connected"] == 1 and step["sessions_active_after"] == 0
        assert number(step["cpu_per_session_pct"]) and step["cpu_per_session_pct"] > 0
    for name in BACKENDS:
        assert_timed_both_ways(steps[name], result)
    for reference in ("echo-24000", "echo-8000"):
        assert steps[reference]["round_trip_ms"]["n"] >= 1
    criteria = result["summary"]["criteria"]
    assert [c["name"].split(":")[0] for c in criteria] == [b for b in BACKENDS for _ in (0, 1)]
    assert "echo-8000" in criteria[3]["name"] and not any(c["pass"] for c in criteria)


def assert_timed_both_ways(step: dict, result: dict) -> None:
    """A backend's quick step: its call named, both directions timed, at its sockets too where
    the capture runs, and its CPU ratio to its echo present."""
    (call,) = step["calls"]
    assert call["session"], "the call was named in its stand-in's log"
    assert call["appends"] > 0 and call["deltas"] > 0, call
    assert step["unpaired_sessions"] == 0
    assert step["unmatched"] == {"uplink": 0, "downlink": 0}, step["unmatched"]
    for direction in ("uplink_ms", "downlink_ms"):
        assert step[direction]["n"] >= 1 and number(step[direction]["p95"]), step[direction]
    if not step["capture"].get("error"):  # root (or CAP_NET_RAW): the hops are timed
        assert step["capture"]["sessions_named"] == 1
        for direction in ("uplink_stages_ms", "downlink_stages_ms"):
            own = step[direction]["transceiver"]
            assert own["n"] == step[direction.replace("_stages", "")]["n"], step[direction]
            assert number(own["p95"])
    assert number(result["summary"]["cpu_ratio_by_n"][step["backend"]]["1"])


def test_quick_run_times_the_grpc_backend_both_ways_at_its_http2_stream(tmp_path: Path) -> None:
    pytest.importorskip("grpc", reason="the grpc extra: pip install -e '.[grpc]'")
    args = ["bench", "sessions", "--backend", "grpc", "--quick", "--out", str(tmp_path)]
    code, stdout, stderr = run_benchmark("rtcedge", args, 180)
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    assert_quick_run_output(stdout, steps=2)
    (path,) = tmp_path.glob("backends-*.json")
    result = json.loads(path.read_text())
    assert [s["backend"] for s in result["steps"]] == ["grpc", "echo-24000"]
    steps = {s["backend"]: s for s in result["steps"]}
    for step in steps.values():
        assert step["ok"] and step["connected"] == 1 and step["sessions_active_after"] == 0
    assert_timed_both_ways(steps["grpc"], result)
    assert steps["echo-24000"]["round_trip_ms"]["n"] >= 1
    criteria = result["summary"]["criteria"]
    assert [c["name"].split(":")[0] for c in criteria] == ["grpc", "grpc"]
