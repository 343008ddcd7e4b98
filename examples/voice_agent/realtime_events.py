"""The Realtime API's events as the pinned ``openai`` package types them (GA names).

A client's event is parsed into its typed model (``parse_client_event``); every server event
the agent sends is built through its model (``server_event``), so a field the API does not
define with that type, or a missing one, fails here rather than at a client.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar, get_args

import pydantic
from openai import BaseModel
from openai.types.realtime import (
    RealtimeClientEvent,
    RealtimeErrorEvent,
)

E = TypeVar("E", bound=BaseModel)


def type_of(model: type[BaseModel]) -> str:
    """The ``type`` literal of an event model: ``SessionCreatedEvent`` -> ``session.created``."""
    (literal,) = get_args(model.model_fields["type"].annotation)
    return literal


def _members(union: object) -> tuple[type[BaseModel], ...]:
    """The models of one of the package's ``Annotated[Union[...], PropertyInfo]`` unions."""
    (members, *_) = get_args(union)
    return get_args(members)


CLIENT_EVENTS: dict[str, type[BaseModel]] = {type_of(m): m for m in _members(RealtimeClientEvent)}


class ClientEventError(Exception):
    """A client event the agent refuses: answered with an ``error`` event, connection kept.

    ``code`` and ``param`` follow OpenAI's error objects (``invalid_value``,
    ``missing_required_parameter``, ...); ``event_id`` is the offending event's, when it had one.
    """

    def __init__(
        self, message: str, code: str, event_id: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.event_id = event_id
        self.param = param


def parse_client_event(text: str) -> BaseModel:
    """The typed model of one client event (a WebSocket text message)."""
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ClientEventError(f"The event is not valid JSON: {e}", "invalid_json") from None
    if not isinstance(raw, dict):
        raise ClientEventError("An event is a JSON object.", "invalid_type")
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    kind = raw.get("type")
    model = CLIENT_EVENTS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ClientEventError(
            f"Invalid value: {kind!r}. Supported values are: {', '.join(sorted(CLIENT_EVENTS))}.",
            "invalid_value",
            event_id,
            "type",
        )
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(part) for part in first["loc"])
        code = "missing_required_parameter" if first["type"] == "missing" else "invalid_value"
        raise ClientEventError(f"{kind}: {param}: {first['msg']}", code, event_id, param) from None


class Ids:
    """Fresh ids for one session's items and responses: ``item_<session>_<n>``."""

    def __init__(self, session_tag: str) -> None:
        self._tag = session_tag
        self._count = 0

    def new(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._tag}_{self._count}"


class ServerEvents:
    """Builds server events with unique ``event_id``s (``event_<session>_<n>``)."""

    def __init__(self, session_tag: str) -> None:
        self._tag = session_tag
        self._count = 0

    def make(self, model: type[E], **fields: Any) -> E:
        """``model`` with its ``type`` and a fresh ``event_id``, validated on construction."""
        self._count += 1
        return model(type=type_of(model), event_id=f"event_{self._tag}_{self._count}", **fields)

    def error(self, refused: ClientEventError) -> RealtimeErrorEvent:
        return self.make(
            RealtimeErrorEvent,
            error={
                "type": "invalid_request_error",
                "code": refused.code,
                "message": refused.message,
                "param": refused.param,
                "event_id": refused.event_id,
            },
        )


def wire(event: BaseModel) -> dict[str, Any]:
    """The JSON object sent for ``event``: the fields that were set (a ``None`` set on purpose,
    such as ``turn_detection: null``, stays)."""
    return event.model_dump(mode="json", exclude_unset=True)
