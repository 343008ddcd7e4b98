"""The ``--http`` listener's TLS options (``--https-cert``, ``--https-key``), declared once, here.

Each is a field of ``TransceiverConfig`` (transceiver/config.py makes its fields with these
declarations) and so an option of ``transceiver serve``; ``rtcedge up`` takes the same options
(``click_options``) and passes them on to its transceiver. The files are read and checked by
``transceiver.signaling.tls``. A light module (no ``cryptography``, no aiortc): ``rtcedge``'s
command line imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from common.options import OPTION, Option, option
from common.options import click_options as options_on

F = TypeVar("F", bound=Callable[..., Any])
PASS_THROUGH = "transceiver.extraArgs"  # the chart sets them through its pass-through only


def cert() -> Any:
    return option(
        "--https-cert",
        metavar="FILE",
        chart=PASS_THROUGH,
        help="PEM certificate (chain) of --http: serve the page and WHIP over https, with "
        "--https-key (a browser gives a page off loopback the microphone only over https) "
        "[default: plain http].",
    )


def key() -> Any:
    return option(
        "--https-key",
        metavar="FILE",
        chart=PASS_THROUGH,
        help="PEM private key (unencrypted) of --https-cert.",
    )


FIELDS: dict[str, Callable[[], Any]] = {"https_cert": cert, "https_key": key}


def specs() -> list[tuple[str, Option]]:
    """(field name, option) of each TLS option, in ``--help`` order."""
    return [(name, make().metadata[OPTION]) for name, make in FIELDS.items()]


def click_options(command: F) -> F:
    """The TLS options on another command than ``transceiver serve`` (``rtcedge up``), each
    parameter named after its field."""
    return options_on(specs())(command)
