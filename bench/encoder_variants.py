"""The sessions benchmark's encoder variants (``rtcedge bench sessions --vary``): what each
setting of the outbound Opus encoder costs per call, measured in the same run as the base.

A variant is the base settings (the ``--opus-*`` options the run was given, the transceiver's
defaults unless told) with some changed, written as the transceiver's options without their
dashes, comma-separated: ``opus-complexity=5``, ``opus-fec=on,opus-packet-loss=10``,
``opus-dtx=on``. For each one the benchmark runs the pcm16 steps against a transceiver started
with those settings, and measures the codec-only reference with them too. The base runs first
(the pcm16 series) and once more after the variants ("base again"): the machine is shared, and
the two base figures apart say how far apart two variants must be before they differ.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any

import click

from bench.harness.cli import Echo
from common.config import ConfigError
from transceiver import codec_options
from transceiver.call.libopus import EncoderSettings

BASE_AGAIN = "base again"
ON_OFF = {"on": True, "off": False}


@dataclass(frozen=True)
class Variant:
    label: str  # as given: "opus-complexity=5"
    encoder: EncoderSettings


def parse_variant(text: str, base: EncoderSettings) -> Variant:
    """``SETTING=VALUE[,SETTING=VALUE...]`` -> the base settings with those changed;
    click.BadParameter naming what is wrong (a setting the transceiver lacks, a bad value, a
    combination it refuses)."""
    by_name = {spec.name.removeprefix("--"): name for name, spec in codec_options.specs()}
    specs = dict(codec_options.specs())
    changes: dict[str, Any] = {}
    for assignment in text.split(","):
        setting, _, value = assignment.strip().partition("=")
        setting = setting.strip().removeprefix("--")
        if setting not in by_name or not value:
            raise click.BadParameter(
                f"{assignment!r}: SETTING=VALUE, SETTING one of {', '.join(sorted(by_name))}"
            )
        spec = specs[by_name[setting]]
        if "/" in spec.flag:  # an on/off pair
            if value not in ON_OFF:
                raise click.BadParameter(f"{setting}: on or off, not {value!r}")
            changes[by_name[setting].removeprefix(codec_options.PREFIX)] = ON_OFF[value]
            continue
        kind = click.types.convert_type(spec.click.get("type"))
        try:
            parsed = kind.convert(value, None, None)
        except click.BadParameter as exc:
            raise click.BadParameter(f"{setting}: {exc.message}") from None
        changes[by_name[setting].removeprefix(codec_options.PREFIX)] = parsed
    encoder = dataclasses.replace(base, **changes)
    try:
        codec_options.check(encoder)
    except ConfigError as exc:
        raise click.BadParameter(f"{text}: {exc}") from None
    return Variant(text.strip(), encoder)


def last_attempts(steps: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """N -> the last attempt of step N in which every call connected."""
    return {s["sessions"]: s for s in steps if s["connected"] == s["sessions"]}


def packets_per_s(step: dict[str, Any]) -> float:
    """The echo's RTP packets per second a caller received, mean over the step's calls (DTX
    sends fewer)."""
    rates = [c["rtp_packets"] / step["window_s"] for c in step["calls"] if step["window_s"]]
    return statistics.fmean(rates) if rates else math.nan


def compare(
    base: list[list[dict[str, Any]]],
    variants: dict[str, list[dict[str, Any]]],
    codec: dict[str, float],
) -> list[dict[str, Any]]:
    """A row per variant: at the largest N that the variant and both base series measured, its
    transceiver CPU per call against the bases' mean, and its codec-only reference against the
    base's (``codec``: label -> codec-only % per call; "base" for the base)."""
    bases = [last_attempts(steps) for steps in base]
    rows = []
    for label, steps in variants.items():
        ours = last_attempts(steps)
        common = sorted(set(ours).intersection(*bases))
        if not common:
            rows.append({"variant": label, "sessions": None})
            continue
        n = common[-1]
        base_cpu = statistics.fmean(b[n]["cpu_per_session_pct"] for b in bases)
        cpu = ours[n]["cpu_per_session_pct"]
        rows.append(
            {
                "variant": label,
                "sessions": n,
                "cpu_per_session_pct": cpu,
                "base_cpu_per_session_pct": base_cpu,
                "cpu_delta_pct": cpu - base_cpu,
                "base_spread_pct": max(b[n]["cpu_per_session_pct"] for b in bases)
                - min(b[n]["cpu_per_session_pct"] for b in bases),
                "codec_per_call_pct": codec[label],
                "codec_delta_pct": codec[label] - codec["base"],
                "packets_per_s": packets_per_s(ours[n]),
                "frame_loss_worst_pct": ours[n]["frame_loss_pct"].get("worst"),
            }
        )
    return rows


def print_comparison(rows: list[dict[str, Any]], base: EncoderSettings, echo: Echo) -> None:
    echo("")
    echo(f"encoder variants (pcm16), each against the base: {base.describe()}")
    echo(
        f"{'variant':<36} {'N':>3} {'trx CPU/call %':>15} {'vs base':>8} "
        f"{'codec-only %':>12} {'vs base':>8} {'pkts/s':>6} {'worst loss %':>12}"
    )
    for r in rows:
        if r["sessions"] is None:
            echo(f"{r['variant']:<36}   - (no step that every series measured)")
            continue
        echo(
            f"{r['variant']:<36} {r['sessions']:>3} {r['cpu_per_session_pct']:>15.3f} "
            f"{r['cpu_delta_pct']:>+8.3f} {r['codec_per_call_pct']:>12.3f} "
            f"{r['codec_delta_pct']:>+8.3f} {r['packets_per_s']:>6.1f} "
            f"{_f(r['frame_loss_worst_pct']):>12}"
        )
    spreads = [r["base_spread_pct"] for r in rows if r["sessions"] is not None]
    if spreads:
        echo(
            f"the base measured twice (first and after the variants) differed by "
            f"{max(spreads):.3f}% of a core per call: the run's noise; CPU per call is the "
            "transceiver's (all threads) / N over the window, the codec-only reference "
            "libopus decode + encode alone, with the variant's settings"
        )


def _f(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"
