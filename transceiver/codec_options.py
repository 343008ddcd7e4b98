"""The outbound Opus encoder's options (``--opus-*``), declared once, here.

Each is a field of ``TransceiverConfig`` (transceiver/config.py makes its fields with these
declarations) and so an option of ``transceiver serve``; ``rtcedge up`` and ``rtcedge bench
sessions`` take the same options (``click_options``) and pass them on to the transceiver they
start (``arguments``). What they set, and what each costs per call: docs/transceiver.md, "The
Opus encoder". A light module (no aiortc, no PyAV): ``rtcedge``'s command line imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from common.config import ConfigError
from common.options import OPTION, Option, between, must, option
from common.options import arguments as option_arguments
from common.options import click_options as options_on
from transceiver.call.libopus import (
    APPLICATIONS,
    BITRATE_RANGE_BPS,
    COMPLEXITY_RANGE,
    DEFAULTS,
    PACKET_LOSS_RANGE_PCT,
    EncoderSettings,
)

F = TypeVar("F", bound=Callable[..., Any])
PASS_THROUGH = "transceiver.extraArgs"  # the chart sets them through its pass-through only
PREFIX = "opus_"  # a field's name is its EncoderSettings attribute's, with this in front


def application() -> Any:
    return option(
        "--opus-application",
        default=DEFAULTS.application,
        type=click.Choice(list(APPLICATIONS)),
        check=must(lambda a: a in APPLICATIONS, f"unknown {{!r}} ({', '.join(APPLICATIONS)})"),
        chart=PASS_THROUGH,
        help="What the Opus encoder of the audio toward callers is tuned for: voip (speech: "
        "SILK or hybrid for a voice, a high-pass filter), audio (music and voices as they "
        "are), or restricted-lowdelay (CELT only, 4 ms less look-ahead, no FEC).",
    )


def bitrate() -> Any:
    return option(
        "--opus-bitrate",
        default=DEFAULTS.bitrate_bps,
        type=int,
        check=between(*BITRATE_RANGE_BPS),
        chart=PASS_THROUGH,
        help="Target bit rate of the audio toward callers, bit/s (VBR: an average).",
    )


def complexity() -> Any:
    return option(
        "--opus-complexity",
        default=DEFAULTS.complexity,
        type=int,
        check=between(*COMPLEXITY_RANGE),
        chart=PASS_THROUGH,
        help="The Opus encoder's complexity, 0-10: its CPU per call against quality at the "
        "same bit rate (docs/transceiver.md has the cost of each).",
    )


def fec() -> Any:
    return option(
        "--opus-fec/--no-opus-fec",
        default=DEFAULTS.fec,
        chart=PASS_THROUGH,
        help="In-band FEC: each packet also carries the previous frame at a lower rate, which "
        "the caller's decoder uses when a packet is lost (needs --opus-packet-loss > 0; favours "
        "SILK; not with restricted-lowdelay).",
    )


def packet_loss() -> Any:
    return option(
        "--opus-packet-loss",
        default=DEFAULTS.packet_loss_pct,
        type=int,
        check=between(*PACKET_LOSS_RANGE_PCT),
        chart=PASS_THROUGH,
        help="Packet loss toward callers the encoder expects, %: the more, the more of the bit "
        "rate goes to loss resilience (and to FEC with --opus-fec).",
    )


def dtx() -> Any:
    return option(
        "--opus-dtx/--no-opus-dtx",
        default=DEFAULTS.dtx,
        chart=PASS_THROUGH,
        help="Discontinuous transmission: after 200 ms of silence toward a caller, send one "
        "DTX frame and then nothing (a refresh every 400 ms while the backend's audio lasts); "
        "the caller's decoder plays comfort noise.",
    )


# Field name -> its declaration, in the order the options are listed.
FIELDS: dict[str, Callable[[], Any]] = {
    "opus_application": application,
    "opus_bitrate_bps": bitrate,
    "opus_complexity": complexity,
    "opus_fec": fec,
    "opus_packet_loss_pct": packet_loss,
    "opus_dtx": dtx,
}


def specs() -> list[tuple[str, Option]]:
    """(field name, option) of each encoder option, as ``option_fields`` gives them."""
    return [(name, make().metadata[OPTION]) for name, make in FIELDS.items()]


def click_options(command: F) -> F:
    """The encoder options on another command than ``transceiver serve``, each parameter named
    after its field (``rtcedge up``, ``rtcedge bench sessions``)."""
    return options_on(specs())(command)


def settings_of(values: Mapping[str, Any]) -> EncoderSettings:
    """The settings from the fields' values (a config, or a command's parameters by field
    name); checked (``check``): ConfigError naming the option."""
    settings = EncoderSettings(**{name.removeprefix(PREFIX): values[name] for name in FIELDS})
    check(settings)
    return settings


def check(settings: EncoderSettings) -> None:
    """Each option's own rule, then the rules between them."""
    for name, spec in specs():
        spec.check(getattr(settings, name.removeprefix(PREFIX)))
    if settings.fec and settings.application == "restricted-lowdelay":
        raise ConfigError(
            "--opus-fec",
            "needs SILK, which --opus-application restricted-lowdelay leaves out (CELT only)",
        )
    if settings.fec and not settings.packet_loss_pct:
        raise ConfigError(
            "--opus-packet-loss",
            "must be > 0 with --opus-fec: libopus adds in-band FEC only for an expected loss "
            "(e.g. 10)",
        )


def arguments(settings: EncoderSettings) -> list[str]:
    """A transceiver's arguments for ``settings``, every option said."""
    return [
        word
        for name, spec in specs()
        for word in option_arguments(spec, getattr(settings, name.removeprefix(PREFIX)))
    ]
