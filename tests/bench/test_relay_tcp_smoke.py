"""Smoke test of the ICE-over-TCP benchmark: ``rtcedge bench tcp --quick`` runs end to end,
through a real relay process, and writes a complete result and its plot.

No timing assertions: the machine is shared and noisy; the figures are for people to read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.plots.cli import plot_command
from tests.support.bench_output import assert_plot_beside, assert_quick_run_output, run_benchmark

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_quick_run_forwards_both_transports_and_compares_accept_designs(tmp_path: Path) -> None:
    code, stdout, stderr = run_benchmark(
        "rtcedge", ["bench", "tcp", "--quick", "--out", str(tmp_path)], timeout_s=90
    )
    assert code == 0, stderr[-2000:]
    files = list(tmp_path.glob("relay_tcp-*.json"))
    assert len(files) == 1, stdout
    result = json.loads(files[0].read_text())
    assert_plot_beside(files[0], stdout)

    cfg = result["config"]
    assert (cfg["rounds"], cfg["window_s"], cfg["quick"]) == (2, 1.0, True)
    transports = result["frames"]["transports"]
    assert set(transports) == {"udp", "tcp"}
    for name, t in transports.items():
        assert len(t["windows"]) == 2, name
        for w in t["windows"]:
            # Every frame offered was forwarded, on its own transport's counter.
            assert w["offered_frames"] > 0 and w["forwarded_frames"] > 0, (name, w)
            assert w["forwarded_frames"] <= w["offered_frames"], (name, w)
            assert w["cpu_us_per_frame"] > 0 and 0 < w["worker_busy"] <= 1.5, (name, w)
        assert t["summary"]["frames_forwarded"] > 0, name
        assert t["summary"]["cpu_us_per_frame"]["n"] > 0, (name, t["summary"])
    # Both windows of a round offered the same load: the ratio is over the same work.
    offered = {name: [w["offered_frames"] for w in t["windows"]] for name, t in transports.items()}
    for udp, tcp in zip(offered["udp"], offered["tcp"], strict=True):
        assert abs(udp - tcp) <= 0.05 * max(udp, tcp), offered
    ratio = result["frames"]["tcp_over_udp"]
    assert ratio["n"] == len(ratio["per_round"]) > 0
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    assert ratio["median"] > 0

    accept = result["accept"]
    assert set(accept["designs"]) == {"reuseport", "acceptor"}
    for name, d in accept["designs"].items():
        assert len(d["samples_us"]) == 2 and all(x > 0 for x in d["samples_us"]), name
    assert accept["acceptor_over_reuseport"]["n"] == 2
    assert [c["name"].split()[0] for c in result["criteria"]] == ["cpu", "server"]
    assert_quick_run_output(stdout, steps=2 * 2 + 2 * 2)

    # ``rtcedge bench plot`` knows the result too.
    files[0].with_suffix(".png").unlink()
    run = CliRunner().invoke(plot_command, [str(files[0])])
    assert run.exit_code == 0, run.output
    assert_plot_beside(files[0], run.output)
