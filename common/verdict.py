"""The shapes of a decision's "no": a packet's ``Drop``, a request's ``Refuse``.

A module that decides returns what it decided: the positive answer in its own type (the relay's
``Target``, the media socket's ``Delivery``, a session route's ``Local`` or ``Forward``, an offer
admission's ``Admit``) or one of these two. Exceptions are left for programming errors and I/O
failures, so a caller reads every outcome of a decision in its signature, and a refusal is never
an exception escaping a step it did not expect (h11's habit: one error type for bad input, at
the parsers, caught by the decision that uses them).

- ``Drop``: a datagram dropped, by ``reason`` (the drop counter's label). Decided per packet
  (the relay's admission, the transceiver's classification): one instance per reason, made once
  by ``drop``, kept by the deciding module in a constant and compared by identity, so a drop costs
  what returning a ``str`` did. Never built per packet.
- ``Refuse``: a request refused (a WHIP offer, a session's DELETE, a resume claim, a new session
  by load): ``reason`` labels its metric and log, ``status``, ``text`` and ``retry_after_s`` are
  what an HTTP answer says of it. ``kind`` names the step that refused when a decision's steps
  count their refusals apart (``transceiver.signaling.admission``).
"""

from __future__ import annotations

from dataclasses import dataclass


class Drop:
    """A datagram dropped for ``reason``: get it from ``drop``, compare with ``is``."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Drop({self.reason!r})"

    def __reduce__(self) -> tuple[object, tuple[str]]:  # a copy or an unpickled one: the same
        return drop, (self.reason,)


_DROPS: dict[str, Drop] = {}


def drop(reason: str) -> Drop:
    """The one ``Drop`` for ``reason`` (made the first time it is asked for, at a deciding
    module's import: ask once, keep it in a constant)."""
    found = _DROPS.get(reason)
    if found is None:
        found = _DROPS[reason] = Drop(reason)
    return found


@dataclass(frozen=True, slots=True)
class Refuse:
    """A request refused: why (``reason``, a metric label), and the answer it gets (``status``
    0 and ``text`` "" when the decider does not answer over HTTP; ``retry_after_s`` None: no
    Retry-After). ``kind``: the step that refused, when one decision has several that count
    apart."""

    reason: str
    text: str = ""
    status: int = 0
    retry_after_s: int | None = None
    kind: str = ""
