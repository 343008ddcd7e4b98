"""Which transceiver owns a WHIP resource: this one, a fellow transceiver, or nobody (404).

A DELETE or PATCH reaches whichever pod the load balancer picks. The resource id is signed and
names its owner (``common.sessionid``); ``SessionRouter.route`` decides, with no I/O:

1. the id does not verify (malformed, bad tag, unknown key, too old)   -> Refuse(<reason>)
2. it names another cluster                                           -> Refuse("cluster")
3. it names this transceiver                                          -> Local(call id)
4. the request was already forwarded once (the hop header)            -> Refuse("looped")
5. no address is configured for the owner (--peer-http[-dns])         -> Refuse("no_peer")
6. otherwise                                                          -> Forward(owner, address)

The address comes from our own configuration for a verified transceiver id, never from the
request: an id carries no address, so nobody can make a pod send a request anywhere else.
``transceiver.signaling.http`` does the forwarding and counts every refusal by reason.

``route_resume`` does the same for the resume token of an offer that moves a call
(``common.resumetoken``, docs/transceiver.md "Moving calls on scale-down"): a token that does
not verify, names another cluster or this transceiver (``self``: the caller re-offered to the
pod it is leaving), or an owner without an address is refused; else the claim goes to the
owner's address, again from our configuration only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.hint import Keyring
from common.resumetoken import ResumeToken, ResumeTokenError, verify_resume_token
from common.sessionid import SESSION_ID_ERROR_REASONS, SessionIdError, verify_session_id
from common.verdict import Refuse

FORWARDED_HEADER = "X-Rtcedge-Forwarded"
"""Set on a forwarded request (to the sender's transceiver id): its receiver never forwards it
again. It grants nothing: a client that sets it only keeps its own request from being passed on."""

RESUME_HEADER = "X-Rtcedge-Resume"
"""The resume token of an offer that moves a call (and of the claim that follows). A bearer
secret for one move: never logged, never in a URL."""
CLAIM_PATH = "/peer/resume-claim"
"""The owner's internal endpoint a claim goes to; it answers only requests that carry
``FORWARDED_HEADER`` (a client never needs it), and a valid token only once."""

REFUSAL_REASONS: tuple[str, ...] = (
    *SESSION_ID_ERROR_REASONS,
    "cluster",  # a valid id of another cluster: not ours to reach
    "looped",  # already forwarded once, and not for us
    "no_peer",  # no --peer-http(-dns) address for the owner (a single transceiver: `rtcedge up`)
    "no_session",  # ours, but ended (or never was)
    "owner_gone",  # the owner's address does not resolve or refuses: it and its calls are gone
    "owner_failed",  # the owner timed out or broke the answer (503, retry)
    "busy",  # too many forwards under way (503, retry)
    "owner_busy",  # too many forwards under way to this owner (503, retry)
    "client_busy",  # too many forwards under way from this client (503, retry)
    "owner_failing",  # the owner timed out a moment ago: failed fast (503, retry)
)


@dataclass(frozen=True, slots=True)
class Local:
    call_id: str


@dataclass(frozen=True, slots=True)
class Forward:
    transceiver_id: int
    address: tuple[str, int]


Route = Local | Forward | Refuse  # a refusal's reason: one of REFUSAL_REASONS


@dataclass(frozen=True, slots=True)
class Claim:
    """Claim ``token`` from its owner at ``address``."""

    token: ResumeToken
    address: tuple[str, int]


@dataclass(frozen=True)
class Peers:
    """Where the other transceivers' WHIP listeners are: ``--peer-http ID=HOST:PORT`` entries,
    else ``--peer-http-dns`` (a template with {id}, e.g. the StatefulSet's per-pod names under
    its headless Service). Mirrors the relay's --transceiver / --transceiver-dns."""

    static: Mapping[int, tuple[str, int]]
    dns_template: str | None = None

    def address(self, transceiver_id: int) -> tuple[str, int] | None:
        found = self.static.get(transceiver_id)
        if found is not None or self.dns_template is None:
            return found
        host, _, port = self.dns_template.replace("{id}", str(transceiver_id)).rpartition(":")
        return host.strip("[]"), int(port)  # the template was checked at start


class SessionRouter:
    """``route(resource id, now, forwarded)``: Local, Forward or Refuse (see the module)."""

    def __init__(
        self,
        keyring: Keyring,
        cluster: int,
        transceiver_id: int,
        peers: Peers,
        max_age_s: float,
    ) -> None:
        self.keyring = keyring
        self.cluster = cluster
        self.transceiver_id = transceiver_id
        self.peers = peers
        self.max_age_s = max_age_s

    def route(self, resource_id: str, now_s: float, forwarded: bool) -> Route:
        try:
            sid = verify_session_id(self.keyring, resource_id, now_s, self.max_age_s)
        except SessionIdError as exc:
            return Refuse(exc.reason)
        if sid.cluster != self.cluster:
            return Refuse("cluster")
        if sid.transceiver_id == self.transceiver_id:
            return Local(sid.call_id)
        if forwarded:
            return Refuse("looped")
        address = self.peers.address(sid.transceiver_id)
        if address is None:
            return Refuse("no_peer")
        return Forward(sid.transceiver_id, address)

    def route_resume(self, token: str, now_s: float, max_ttl_s: float) -> Claim | Refuse:
        """Where to claim a resume token (see the module); ``max_ttl_s``: the longest a token
        we give lives (``--migrate-deadline``)."""
        try:
            verified = verify_resume_token(self.keyring, token, now_s, max_ttl_s)
        except ResumeTokenError as exc:
            return Refuse(exc.reason)
        if verified.cluster != self.cluster:
            return Refuse("cluster")
        if verified.transceiver_id == self.transceiver_id:
            return Refuse("self")
        address = self.peers.address(verified.transceiver_id)
        if address is None:
            return Refuse("no_peer")
        return Claim(verified, address)
