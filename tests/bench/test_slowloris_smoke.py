"""``python3 -m bench.slowloris`` runs end to end at a small size and prints its figures: the
slow connections closed by each victim, those over the cap refused, none left open."""

from __future__ import annotations

import re

from tests.support.bench_output import run_benchmark


def test_a_small_run_prints_every_figure():
    args = ["--connections", "12", "--header-timeout", "1", "--trx-cap", "8", "--relay-cap", "4"]
    code, out, err = run_benchmark("bench.slowloris", [*args, "--requests", "5"], timeout_s=60)
    assert code == 0, err
    closed = [int(n) for n in re.findall(r"closed by the server after its timeout: (\d+)", out)]
    refused = [int(n) for n in re.findall(r"refused at accept \(over the cap, 503\): (\d+)", out)]
    assert closed == [8, 4] and refused == [4, 4], out
    assert re.findall(r"still open after \S+ s: (\d+)", out) == ["0", "0"], out
    for phase in ("reference", "attacked", "after"):
        assert out.count(f"  {phase} ") == 2, out
