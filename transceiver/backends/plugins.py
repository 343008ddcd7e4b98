"""Backends from outside rtcedge, run in the transceiver's process: ``--backend module:factory``,
or a name that an installed package registers under the entry point group ``rtcedge.backends``
(docs/plugins.md).

A factory is called once, at start, with the operator's backend options (``BackendOptions``),
and returns the process's one ``Backend``. Whatever goes wrong on the way (the module does not
import, it has no such factory, the factory refuses the options or returns something that is no
``Backend``) is a ``PluginError`` of one line, which the configuration reports as an error of
``--backend``; the traceback goes to the debug log, for the plugin's author.

What a ``--backend`` value names, in this order (``resolve``): a built-in backend; with a ``:``,
a module and its factory on the Python path; else the name of an entry point.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points

from transceiver.backend import PCM16, Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "Available",
    "BackendFactory",
    "BackendOptions",
    "PluginError",
    "available",
    "build",
    "listing",
    "load_factory",
    "resolve",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rtcedge.backends"
# module:attribute, as an entry point's value writes it (dotted on both sides).
_REFERENCE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class BackendOptions:
    """What a plugin's factory gets: the backend options the operator set on ``transceiver
    serve`` (each ``None`` when not set). A factory takes what it needs and raises ValueError
    for an option it cannot use, which fails the start in one line naming ``--backend``."""

    url: str | None = None  # --backend-url (RTCEDGE_BACKEND_URL): may hold a credential
    key: str | None = field(default=None, repr=False)  # --backend-key-file / RTCEDGE_BACKEND_KEY
    ca_file: str | None = None  # --backend-ca-file: the CA bundle of a TLS service it dials
    audio_format: str = PCM16  # --audio-format: pcm16 or opus
    sample_rate: int | None = None  # --audio-rate: one of SAMPLE_RATES, or None (the backend's)


BackendFactory = Callable[[BackendOptions], Backend]


class PluginError(Exception):
    """A plugin backend could not be found, loaded or built; the message is one line."""


@dataclass(frozen=True)
class Available:
    """One backend ``--backend list`` shows: what to pass, and where it comes from."""

    name: str
    source: str  # "built-in", or the package and the entry point's factory
    problem: str | None = None  # why it cannot be used, if it cannot


def is_reference(value: str) -> bool:
    """Whether a --backend value is a module:factory (else a name)."""
    return ":" in value


def resolve(value: str, builtins: Sequence[str]) -> str | None:
    """The module:factory a --backend value stands for, or None for a built-in."""
    if value in builtins:
        return None
    if is_reference(value):
        if not _REFERENCE.fullmatch(value):
            raise PluginError(f"{value!r} is not MODULE:FACTORY (e.g. my_package.backend:make)")
        return value
    found = [ep for ep in _registered() if ep.name == value]
    if not found:
        names = [ep.name for ep in _registered() if ep.name not in builtins]
        known = ", ".join([*builtins, *sorted(set(names))])
        raise PluginError(
            f"unknown backend {value!r} ({known}; or MODULE:FACTORY; --backend list shows them)"
        )
    if len({ep.value for ep in found}) > 1:
        where = ", ".join(f"{ep.value} ({_package(ep)})" for ep in found)
        raise PluginError(f"{value!r} is registered more than once: {where}; give MODULE:FACTORY")
    return found[0].value


def load_factory(reference: str) -> BackendFactory:
    """Import ``module:factory`` and return the factory (PluginError in one line)."""
    module_name, _, attribute = reference.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:  # any error of someone else's module: a start that fails clearly
        log.debug("cannot import %s", module_name, exc_info=True)
        raise PluginError(f"{reference}: cannot import {module_name}: {_one_line(exc)}") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise PluginError(f"{reference}: {module_name} has no {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise PluginError(f"{reference}: {attribute} is not callable ({type(target).__name__})")
    return target  # type: ignore[return-value]


def build(factory: BackendFactory, options: BackendOptions, reference: str) -> Backend:
    """The factory's backend (PluginError in one line: the factory's ValueError, or any failure
    of it, or a result that is no ``transceiver.backend.Backend``)."""
    try:
        backend = factory(options)
    except ValueError as exc:  # the factory refuses the options: its words
        raise PluginError(f"{reference}: {' '.join(str(exc).split())}") from None
    except Exception as exc:
        log.debug("%s failed", reference, exc_info=True)
        raise PluginError(f"{reference} failed: {_one_line(exc)}") from None
    if not isinstance(backend, Backend):
        raise PluginError(
            f"{reference} returned {type(backend).__name__}, not a transceiver.backend.Backend"
        )
    return backend


def available(builtins: Sequence[str]) -> list[Available]:
    """The built-ins, then every registered entry point (each loaded, to say if it cannot be)."""
    out = [Available(name, "built-in") for name in builtins]
    registered = _registered()
    for ep in sorted(registered, key=lambda ep: (ep.name, ep.value)):
        problem = None
        if ep.name in builtins:
            problem = "ignored: a built-in has this name"
        elif sum(other.name == ep.name for other in registered) > 1:
            problem = "registered more than once: give MODULE:FACTORY"
        elif not _REFERENCE.fullmatch(ep.value):
            problem = f"{ep.value!r} is not MODULE:FACTORY"
        else:
            try:
                load_factory(ep.value)
            except PluginError as exc:
                problem = str(exc)
        out.append(Available(ep.name, f"plugin {ep.value} from {_package(ep)}", problem))
    return out


def listing(builtins: Sequence[str]) -> str:
    """What ``--backend list`` prints: a line per backend, and how to name any other."""
    rows = available(builtins)
    width = max(len(row.name) for row in rows)
    lines = []
    for row in rows:
        problem = f"  [cannot be used: {row.problem}]" if row.problem else ""
        lines.append(f"{row.name:<{width}}  {row.source}{problem}")
    lines.append(
        f"(--backend MODULE:FACTORY loads any other factory on the Python path; packages add "
        f"names under the entry point group {ENTRY_POINT_GROUP}: docs/plugins.md)"
    )
    return "\n".join(lines)


def _registered() -> list[EntryPoint]:
    return list(entry_points(group=ENTRY_POINT_GROUP))


def _package(ep: EntryPoint) -> str:
    """The distribution an entry point comes from, its version and where it is installed."""
    dist = ep.dist
    if dist is None:
        return "an unknown package"
    where = _location(dist)
    return f"{dist.metadata['Name']} {dist.version}" + (f" ({where})" if where else "")


def _location(dist: object) -> str:
    locate = getattr(dist, "locate_file", None)
    try:
        return str(locate("")) if locate else ""
    except Exception:
        return ""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
