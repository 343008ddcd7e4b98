"""The sessions benchmark's encoder variants (``--vary``): each is the base settings with some
changed, refused as the transceiver would refuse them; the comparison takes each variant's CPU
per call against the mean of the two base series at the largest N all of them measured."""

from __future__ import annotations

import re

import click
import pytest

from bench.encoder_variants import compare, parse_variant
from transceiver.call.libopus import DEFAULTS, EncoderSettings

SET = EncoderSettings("audio", 48000, 5, fec=True, packet_loss_pct=15, dtx=False)


def test_a_benchmark_variant_is_the_base_with_its_settings_changed():
    assert parse_variant("opus-complexity=5", DEFAULTS).encoder.complexity == 5
    both = parse_variant("opus-fec=on, opus-packet-loss=10", DEFAULTS).encoder
    assert (both.fec, both.packet_loss_pct, both.complexity) == (True, 10, 10)
    assert parse_variant("opus-dtx=on", SET).encoder == EncoderSettings(
        "audio", 48000, 5, fec=True, packet_loss_pct=15, dtx=True
    )
    assert parse_variant("--opus-complexity=1", DEFAULTS).label == "--opus-complexity=1"
    for text, says in [
        ("complexity=5", "SETTING one of"),
        ("opus-complexity", "SETTING=VALUE"),
        ("opus-complexity=x", "opus-complexity"),
        ("opus-dtx=yes", "on or off"),
        ("opus-fec=on", "--opus-packet-loss: must be > 0 with --opus-fec"),
        ("opus-bitrate=1", "--opus-bitrate: must be 6000..510000"),
    ]:
        with pytest.raises(click.BadParameter, match=re.escape(says)):
            parse_variant(text, DEFAULTS)


def step(n: int, cpu: float, packets: int = 500) -> dict[str, object]:
    return {
        "sessions": n,
        "connected": n,
        "cpu_per_session_pct": cpu,
        "window_s": 10.0,
        "frame_loss_pct": {"worst": 0.1},
        "calls": [{"rtp_packets": packets}] * n,
    }


def test_a_variant_is_compared_at_the_largest_n_every_series_measured():
    bases = [[step(10, 1.0), step(20, 1.6)], [step(10, 1.2), step(20, 1.8)]]
    variants = {
        "opus-complexity=1": [step(10, 0.8), step(20, 1.3, packets=480)],
        "opus-dtx=on": [step(10, 1.1)],  # its N=20 did not run
        "none": [],
    }
    rows = compare(bases, variants, {"base": 0.34, "opus-complexity=1": 0.2, "opus-dtx=on": 0.3})
    low, dtx, none = rows
    assert low["sessions"] == 20 and low["base_cpu_per_session_pct"] == pytest.approx(1.7)
    assert low["cpu_delta_pct"] == pytest.approx(-0.4)
    assert low["base_spread_pct"] == pytest.approx(0.2)
    assert low["codec_delta_pct"] == pytest.approx(-0.14)
    assert low["packets_per_s"] == 48.0
    assert dtx["sessions"] == 10 and dtx["cpu_delta_pct"] == pytest.approx(0.0)
    assert none == {"variant": "none", "sessions": None}
