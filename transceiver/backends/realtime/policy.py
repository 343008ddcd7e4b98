"""Which Realtime client events a caller may send to the model server, and which fields.

The caller is on the internet; the model server is the operator's, configured by the operator
(model, instructions, tools, limits). OpenAI's own WebRTC service lets the app change almost
anything; behind rtcedge, only what the operator allows passes: an event type must be listed,
and every field it sets must lie under one of the listed field paths (dotted, from the event's
top level, e.g. ``session.audio.output.voice``). Anything else is refused with an ``error``
event to the caller and never reaches the model server. Caller events are also rate-limited
(each one may cost the operator a model turn).

Sans-I/O: ``now`` comes in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_ALLOWED", "CallerEventBudget", "ClientEventPolicy", "load_policy"]

# What a caller may do by default: talk (push-to-talk commits), ask for or cancel a turn, add a
# user text message, cut what it heard, and pick a voice or the turn detection. Not: the model,
# instructions, tools, tool choice, token limits, audio formats (the transceiver fixes them),
# tracing, or appending audio (that comes over RTP).
DEFAULT_ALLOWED: Mapping[str, tuple[str, ...]] = {
    "session.update": (
        "session.type",
        "session.audio.output.voice",
        "session.audio.output.speed",
        "session.audio.input.turn_detection",
        "session.audio.input.noise_reduction",
        "session.output_modalities",
    ),
    "response.create": ("response.output_modalities", "response.metadata"),
    "response.cancel": ("response_id",),
    "conversation.item.create": (
        "previous_item_id",
        "item.type",
        "item.role",
        "item.content",
    ),
    "conversation.item.truncate": ("item_id", "content_index", "audio_end_ms"),
    "conversation.item.retrieve": ("item_id",),
    "input_audio_buffer.commit": (),
    "input_audio_buffer.clear": (),
}
# Fields every event may carry.
ALWAYS = frozenset({"type", "event_id"})
# conversation.item.create: a user message (a system message would override the operator's), or
# the output of a tool call the app runs itself, when the policy lets it set item.call_id and
# item.output (not by default: the operator opts in).
ITEMS_A_CALLER_ADDS = "a user message or a function_call_output"


@dataclass
class ClientEventPolicy:
    """The operator's allowlist of caller events, and their rate (a token bucket per call)."""

    allowed: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ALLOWED))
    rate_per_s: float = 10.0
    burst: float = 20.0

    def limiter(self) -> CallerEventBudget:
        return CallerEventBudget(self.rate_per_s, self.burst)

    def refusal(self, event: dict) -> str | None:
        """Why ``event`` may not pass to the model server, or None when it may."""
        kind = event.get("type")
        if not isinstance(kind, str):
            return "an event needs a string 'type'"
        prefixes = self.allowed.get(kind)
        if prefixes is None:
            return f"events of type {kind!r} are not allowed here"
        for path in _leaf_paths(event):
            if path in ALWAYS:
                continue
            if not any(path == p or path.startswith(p + ".") for p in prefixes):
                return f"{kind} may not set {path!r}"
        if kind == "conversation.item.create" and not _caller_item(event):
            return f"conversation.item.create may only add {ITEMS_A_CALLER_ADDS}"
        return None


@dataclass
class CallerEventBudget:
    """``burst`` caller events at once, then ``rate_per_s``: one per call."""

    rate_per_s: float
    burst: float
    tokens: float = 0.0
    updated: float | None = None

    def allow(self, now: float) -> bool:
        if self.updated is None:
            self.tokens = self.burst
        else:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _leaf_paths(obj: Mapping, prefix: str = "") -> Iterator[str]:
    """Dotted paths of an event's fields, stopping at lists and scalars (which are leaves)."""
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaf_paths(value, path + ".")
        else:
            yield path


def _caller_item(event: Mapping) -> bool:
    """Whether a conversation.item.create adds an item a caller may add (its fields were
    checked against the allowlist already)."""
    kind = _get(event, "item.type")
    if kind == "message":
        return _get(event, "item.role") == "user"
    return kind == "function_call_output"


def _get(obj: Mapping, path: str) -> object:
    for part in path.split("."):
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)  # type: ignore[assignment]
    return obj


def _allow_table(allow: object, option: str) -> dict[str, tuple[str, ...]]:
    """The policy file's ``allow``: event types to lists of field paths."""
    if not isinstance(allow, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(p, str) for p in v)
        for k, v in allow.items()
    ):
        raise ValueError(f"{option}: 'allow' maps event types to lists of field paths")
    if "input_audio_buffer.append" in allow:
        raise ValueError(f"{option}: input_audio_buffer.append comes from RTP, not callers")
    return {k: tuple(v) for k, v in allow.items()}


def load_policy(text: str, option: str) -> ClientEventPolicy:
    """A policy from the operator's JSON file: ``{"allow": {"event.type": ["field.path", ...]},
    "rate_per_s": 10, "burst": 20}``; absent keys keep the defaults. ValueError names ``option``."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{option}: not JSON: {exc}") from None
    if not isinstance(raw, dict) or set(raw) - {"allow", "rate_per_s", "burst"}:
        raise ValueError(f"{option}: expected an object with 'allow', 'rate_per_s', 'burst'")
    policy = ClientEventPolicy()
    allow = raw.get("allow", None)
    if allow is not None:
        policy.allowed = _allow_table(allow, option)
    for name in ("rate_per_s", "burst"):
        value = raw.get(name, getattr(policy, name))
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{option}: {name} must be a number > 0")
        setattr(policy, name, float(value))
    return policy
