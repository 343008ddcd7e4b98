"""A benchmark's result: the header every run records, and the JSON file it is written to.

Results are compared across runs and commits, so the file format is one for all benchmarks:
``<out>/<benchmark>-<UTC stamp>.json``, keys sorted, figures that could not be measured (NaN,
infinities) written as JSON null, which every JSON reader accepts.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def utc_now() -> str:
    """When a run started, as its result records it."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def run_header(benchmark: str, started_utc: str, cpus_allowed: set[int], config: Any) -> dict:
    """What a result needs to be compared with another: which benchmark, when, where, how."""
    return {
        "benchmark": benchmark,
        "started_utc": started_utc,
        "host": {
            "cpus_allowed": sorted(cpus_allowed),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "config": asdict(config),
    }


def write_result(result: dict[str, Any], out_dir: str, benchmark: str) -> Path:
    """Write ``result`` to a new file in ``out_dir``; returns its path."""
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{benchmark}-{stamp}.json"
    path.write_text(json.dumps(finite(result), indent=2, sort_keys=True, default=str) + "\n")
    return path


def finite(obj: Any) -> Any:
    """NaN and infinities (figures that could not be measured) as None, at any depth."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
