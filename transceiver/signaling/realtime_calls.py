"""The Realtime API's door: what ``POST /v1/realtime/calls`` takes and the session it sets.

OpenAI's WebRTC clients POST their offer to ``/v1/realtime/calls`` with a client secret as the
bearer, either as the bare SDP (``application/sdp``) or as a form (``multipart/form-data``) with
the offer in ``sdp`` and a session in ``session`` (JSON). The answer, the capacity and the
quotas are WHIP's (``transceiver.signaling.admission``: the door is another ``Door`` of the same
``OfferAdmission``); what differs is read here.

Whose session a call gets, strongest last (``RealtimeBackendConfig.session_update``):
1. the session the call's form sets: from a client secret's holder (a browser), only what the
   caller policy lets a caller set by ``session.update`` (``transceiver.backends.realtime.policy``);
   from an operator API key's holder (an app server), anything ``parse_session`` takes;
2. the session in the client secret, which the app server set when it minted it (trusted: the
   app server holds an operator key);
3. the operator's own session (``--realtime-session-file``), which nobody overrides.
(1 over 2: a browser chooses only what the policy allows, and the app server, which set 2, set
what the policy allows too.)

Sans-I/O: bytes and the caller in, the offer and the session's metadata (or a ``Refuse``) out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from common.verdict import Refuse
from transceiver.backends.realtime.backend import app_session_metadata, merged
from transceiver.backends.realtime.policy import ClientEventPolicy
from transceiver.signaling.admission import SDP, Door
from transceiver.signaling.gate import Caller, Gate
from transceiver.signaling.offer import refused, too_large
from transceiver.signaling.realtime_secrets import MAX_SESSION_BYTES, parse_session

__all__ = [
    "CALLS_PATH",
    "FORM",
    "MAX_FORM_EXTRA_BYTES",
    "RealtimeCalls",
    "parse_call_form",
]

CALLS_PATH = "/v1/realtime/calls"
FORM = "multipart/form-data"
# A form's bytes beyond its offer: the session, the parts' heads and the boundaries.
MAX_FORM_EXTRA_BYTES = MAX_SESSION_BYTES + 1024


@dataclass(frozen=True)
class CallForm:
    """What a ``POST /v1/realtime/calls`` carried: the offer, and a session if it had one."""

    offer: bytes
    session: object = None  # the form's ``session`` field, parsed JSON; None without one


def parse_call_form(content_type: str, body: bytes) -> CallForm:
    """The offer and session of a body (ValueError says what is wrong with it).

    ``content_type`` is the whole header: a form's boundary is in it. The form is parsed by the
    standard library's MIME parser (a form is a MIME multipart message, RFC 7578).
    """
    if content_type.split(";", 1)[0].strip().lower() == SDP:
        return CallForm(body)
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise ValueError("the form is not multipart (is its boundary in the Content-Type?)")
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = _field_name(part)
        if name in fields:
            raise ValueError(f"the form's field {name!r} is given twice")
        if name in ("sdp", "session"):
            fields[name] = part.get_payload(decode=True) or b""
    if "sdp" not in fields:
        raise ValueError("the form has no 'sdp' field")
    session = None
    if "session" in fields:
        try:
            session = json.loads(fields["session"])
        except ValueError:
            raise ValueError("the form's 'session' is not JSON") from None
    return CallForm(fields["sdp"], session)


def _field_name(part: Message) -> str:
    disposition = part.get("Content-Disposition", "")
    if not str(disposition).lower().startswith("form-data"):
        raise ValueError("a form part is not form-data")
    name = part.get_param("name", header="content-disposition")
    if not isinstance(name, str):
        raise ValueError("a form part has no name")
    return name


class RealtimeCalls:
    """The door of ``/v1/realtime/calls``: its gate, the bodies it takes, and the session a
    call's caller may set (see the module docstring)."""

    def __init__(self, gate: Gate, policy: ClientEventPolicy, max_sdp_bytes: int) -> None:
        self.max_body_bytes = max_sdp_bytes + MAX_FORM_EXTRA_BYTES
        self.door = Door(gate, frozenset({SDP, FORM}), self.max_body_bytes)
        self.policy = policy
        self.max_sdp_bytes = max_sdp_bytes

    def read(
        self, caller: Caller, content_type: str, body: bytes
    ) -> tuple[bytes, dict[str, str]] | Refuse:
        """The offer to check (as WHIP's) and the metadata that carries the call's session to
        the backend, or why the body is refused."""
        try:
            form = parse_call_form(content_type, body)
        except ValueError as exc:
            return refused(str(exc), "invalid_form")
        if len(form.offer) > self.max_sdp_bytes:
            return too_large(self.max_sdp_bytes)
        session = self.session(caller, form.session)
        if isinstance(session, Refuse):
            return session
        return form.offer, app_session_metadata(session)

    def session(self, caller: Caller, asked: object) -> dict[str, Any] | Refuse:
        """The app's session for the call: the form's (checked as the caller's ``session.update``
        unless an operator key sent it) over the client secret's."""
        granted = caller.session or {}
        if asked is None:
            return granted
        try:
            session = parse_session(asked, "session")
        except ValueError as exc:
            return refused(str(exc), "invalid_session")
        if not caller.operator:
            refusal = self.policy.refusal({"type": "session.update", "session": session})
            if refusal is not None:
                return refused(f"session: {refusal}", "session_refused", 403)
        return merged(granted, session)
