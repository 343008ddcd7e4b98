"""How a swap refuses an aiortc object it was not verified with: one message for all of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def unsupported(cls_name: str, missing: Iterable[str]) -> RuntimeError:
    """The error for an aiortc ``cls_name`` that lacks (or holds otherwise) ``missing``."""
    return RuntimeError(
        f"aiortc's {cls_name} has no {', '.join(missing)} where transceiver.call.seam "
        "expects it; this aiortc is not supported"
    )


def check_instance(obj: Any, cls: type, names: Iterable[str]) -> None:
    """Refuse ``obj`` unless it is exactly aiortc's ``cls`` (not yet swapped, not another
    subclass) and has every one of ``names``."""
    if type(obj) is not cls:
        raise RuntimeError(f"expected aiortc's {cls.__name__}, found {type(obj).__name__}")
    missing = [name for name in names if not hasattr(obj, name)]
    if missing:
        raise unsupported(cls.__name__, missing)
