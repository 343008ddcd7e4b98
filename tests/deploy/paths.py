"""Where the chart and the Dockerfile are, for the deploy tests that need no Helm (render.py
needs the deploy extra)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "rtcedge"
