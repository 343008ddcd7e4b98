"""What the ``relay`` and ``transceiver`` command lines share: env-backed options and logging."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

ENV_PREFIX = "RTCEDGE_"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d] %(message)s"


def env_option(*names: str, env: str, **kw: Any) -> Callable[[Any], Any]:
    """A click option also settable as ``RTCEDGE_<env>`` (shown in ``--help``)."""
    return click.option(*names, envvar=f"{ENV_PREFIX}{env}", show_envvar=True, **kw)


def setup_logging(level: str) -> None:
    """One log format for every process; the pid tells workers apart."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
