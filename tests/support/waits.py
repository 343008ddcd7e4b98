"""Bounded waits: poll a condition until it holds or a deadline passes, run a coroutine with one.

The tests never sleep for a fixed time to let something happen: they poll for it, and fail with
a bound when it does not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(read: Callable[[], object], expected: object, timeout_s: float = 3.0) -> bool:
    """True once ``read()`` returns ``expected``; False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while read() != expected:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """``wait_for`` inside an event loop: True once ``predicate()`` holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 60) -> T:
    """Run ``coro`` in a fresh event loop; TimeoutError after ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))
