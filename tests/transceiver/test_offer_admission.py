"""transceiver.signaling.admission without sockets: every reason a WHIP offer is refused for, and
the order of the steps, with request facts, a stand-in server's capacity and the time passed in."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest

from common.hint import Keyring
from common.resumetoken import RESUME_TOKEN_ERROR_REASONS, sign_resume_token
from common.verdict import Refuse
from transceiver.headroom import no_capacity
from transceiver.migration import FAILURE_REASONS
from transceiver.ownership import Claim, Peers, SessionRouter
from transceiver.signaling.admission import (
    RESUME_REFUSALS,
    Admit,
    OfferAdmission,
    OfferRequest,
    resume_refused,
)
from transceiver.signaling.gate import Gate
from transceiver.signaling.offer import FORM_REFUSAL_REASONS, OFFER_REFUSAL_REASONS
from transceiver.signaling.quota import RateLimiter, SessionsPerClient
from transceiver.signaling.tokens import TokenVerifier, mint

NOW = 100.0  # time.monotonic()
UNIX_NOW = 1_750_000_000.0
SECRET = b"k" * 32
RING = Keyring({0: bytes(range(32))}, 0)
CLUSTER, HERE, OWNER = 1, 3, 2
CALL = "00112233445566778899aabbccddeeff"
DEADLINE_S = 10.0
MAX_SDP_BYTES = 16384
OFFER = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\n"
    "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
    "a=fingerprint:sha-256 " + ":".join(["AB"] * 32) + "\r\na=setup:actpass\r\n"
    "a=rtpmap:111 opus/48000/2\r\n"
)
PROXY = [ipaddress.ip_network("10.0.0.0/8")]


class Server:
    """The capacity rule of a stand-in server: its session limit, draining, and the offers the
    admission says are pending; it records what it was asked."""

    def __init__(self, max_sessions: int = 100) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[str, object] = {}
        self.draining = False
        self.asked: list[int] = []  # the pending count of each question

    def capacity_refusal(self, now: float | None = None, pending: int = 0) -> Refuse | None:
        self.asked.append(pending)
        if self.draining:
            return no_capacity("draining", "draining: no new sessions", 5)
        if len(self.sessions) + pending >= self.max_sessions:
            return no_capacity("max_sessions", "session limit reached", 5)
        return None


def admission(
    server: Server | None = None,
    token: str | None = None,
    signed: bool = False,
    rate: RateLimiter | None = None,
    per_client: int = 0,
) -> OfferAdmission:
    """This transceiver (3 of cluster 1), whose fellow 2 is at 10.0.0.2."""
    verifier = TokenVerifier((SECRET,), 3600) if signed else None
    router = SessionRouter(RING, CLUSTER, HERE, Peers({OWNER: ("10.0.0.2", 8080)}), 3660.0)
    return OfferAdmission(
        Gate(token, verifier),
        server or Server(),
        router,
        max_sdp_bytes=MAX_SDP_BYTES,
        migrate_deadline_s=DEADLINE_S,
        trusted=PROXY,
        rate=rate,
        per_client=SessionsPerClient(per_client) if per_client else None,
    )


def request(**facts) -> OfferRequest:
    return OfferRequest(**{"peer": "198.51.100.7", "content_length": len(OFFER), **facts})


def resume_token(owner: int = OWNER, cluster: int = CLUSTER, expires_s: float = UNIX_NOW + 5):
    return sign_resume_token(RING, cluster, owner, expires_s, CALL, bytes(9))


def decided(adm: OfferAdmission, *requests: OfferRequest, now: float = NOW) -> list:
    return [adm.decide(r, now, UNIX_NOW) for r in requests]


def resumed(token: str) -> Claim | Refuse | None:
    adm = admission()
    admit = adm.decide(request(resume=token), NOW, UNIX_NOW)
    assert isinstance(admit, Admit)
    return adm.resume(admit, UNIX_NOW)


# -- each refusal: a scenario whose last verdict is it ------------------------------------------
def _expired_token() -> list:
    old = mint(SECRET, UNIX_NOW - 7200, 60)
    return decided(admission(signed=True), request(authorization=f"Bearer {old}"))


def _full() -> list:
    server = Server(max_sessions=1)
    server.sessions["live"] = object()
    return decided(admission(server), request())


def _draining() -> list:
    server = Server()
    server.draining = True
    return decided(admission(server), request())


def _over_rate() -> list:
    return decided(admission(rate=RateLimiter(1.0, 2)), *[request()] * 3)


def _over_sessions() -> list:
    server = Server()
    adm = admission(server, per_client=1)
    server.sessions["s1"] = object()
    first = adm.decide(request(), NOW, UNIX_NOW)
    adm.settle(first, "s1")  # the client's one session, live
    return decided(adm, request())


DECIDED: dict[str, Callable[[], list]] = {
    # 1. gate
    "missing": lambda: decided(admission(token="s3cret"), request()),
    "wrong_token": lambda: decided(admission(token="s3cret"), request(authorization="Bearer x")),
    "expired": _expired_token,
    "bad_signature": lambda: decided(
        admission(signed=True),
        request(authorization=f"Bearer {mint(b'o' * 32, UNIX_NOW, 60)}"),
    ),
    # 2. content type, 3. declared size
    "content_type": lambda: decided(admission(), request(content_type="text/plain")),
    "too_large": lambda: decided(admission(), request(content_length=MAX_SDP_BYTES + 1)),
    # 4. capacity (the server's reasons: its own, and transceiver.headroom's)
    "max_sessions": _full,
    "draining": _draining,
    # 6. rate, 7. per-client limit
    "client_rate": _over_rate,
    "client_sessions": _over_sessions,
}
# The status, kind and text of each, and its Retry-After.
ANSWERS = {
    "missing": (401, "token", "missing or invalid bearer token", None),
    "wrong_token": (401, "token", "missing or invalid bearer token", None),
    "expired": (401, "token", "token expired", None),
    "bad_signature": (401, "token", "missing or invalid bearer token", None),
    "content_type": (415, "request", "Content-Type must be application/sdp, not text/plain", None),
    "too_large": (413, "offer", "offer larger than 16384 bytes", None),
    "max_sessions": (503, "capacity", "session limit reached", 5),
    "draining": (503, "capacity", "draining: no new sessions", 5),
    "client_rate": (429, "client", "too many new sessions from this client", 1),
    "client_sessions": (429, "client", "this client already has 1 sessions", 5),
}


@pytest.mark.parametrize("reason", DECIDED)
def test_each_refusal_of_an_offers_head_is_made_by_its_step(reason):
    refused = DECIDED[reason]()[-1]
    assert isinstance(refused, Refuse) and refused.reason == reason
    assert (refused.status, refused.kind, refused.text, refused.retry_after_s) == ANSWERS[reason]


def test_every_step_of_decide_has_a_scenario():
    assert set(DECIDED) == set(ANSWERS)
    assert {ANSWERS[r][1] for r in DECIDED} == {"token", "request", "offer", "capacity", "client"}


# 8. offer checks: each reason of transceiver.signaling.offer but the size (decide's, above).
OFFERS = {
    "not_utf8": b"v=0\r\n\xff",
    "m_lines": (OFFER + "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n" * 4).encode(),
    "rtpmap_lines": (OFFER + "a=rtpmap:96 x/8000\r\n" * 32).encode(),
    "fmtp_lines": (OFFER + "a=fmtp:111 minptime=10\r\n" * 33).encode(),
    "section_lines": (OFFER + "a=ssrc:1 cname:x\r\n" * 200).encode(),
    "lines": ("v=0\r\n" + "a=x\r\n" * 500).encode(),
    "invalid": OFFER.replace("opus", "PCMU").encode(),
}


@pytest.mark.parametrize("reason", OFFERS)
def test_each_refusal_of_an_offers_body_is_a_400_counted_by_its_label(reason):
    refused = admission().offer(OFFERS[reason])
    assert isinstance(refused, Refuse), refused
    assert (refused.reason, refused.status, refused.kind) == (reason, 400, "offer")


def test_every_offer_refusal_has_a_scenario():
    # (the realtime door's form refusals: tests/transceiver/test_realtime_calls.py)
    assert set(OFFERS) | {"too_large", *FORM_REFUSAL_REASONS} == set(OFFER_REFUSAL_REASONS)
    assert admission().offer(OFFER.encode()).startswith("v=0"), "a good offer passes"


# 9. resume: the token's route (here), and the owner's claim (the handler's I/O, answered here).
ROUTES = {
    "malformed": lambda: resumed("x" * 10),
    "expired": lambda: resumed(resume_token(expires_s=UNIX_NOW - 1)),
    "future": lambda: resumed(resume_token(expires_s=UNIX_NOW + DEADLINE_S + 3600)),
    "cluster": lambda: resumed(resume_token(cluster=0)),
    "self": lambda: resumed(resume_token(owner=HERE)),
    "no_peer": lambda: resumed(resume_token(owner=9)),
}


@pytest.mark.parametrize("reason", ROUTES)
def test_each_refusal_of_a_resume_tokens_route_is_made_by_step_nine(reason):
    refused = ROUTES[reason]()
    assert isinstance(refused, Refuse) and (refused.reason, refused.kind) == (reason, "resume")
    assert refused.status == RESUME_REFUSALS.get(reason, (400,))[0]


def test_a_good_resume_token_is_claimed_from_its_owners_configured_address():
    claim = resumed(resume_token())
    assert isinstance(claim, Claim) and claim.address == ("10.0.0.2", 8080)
    assert claim.token.call_id == CALL
    adm = admission()
    assert adm.resume(adm.decide(request(), NOW, UNIX_NOW), UNIX_NOW) is None, "a new call"


def test_a_refused_claim_is_answered_by_its_reason():
    answers = {r: resume_refused(r) for r in RESUME_REFUSALS}
    assert {r: (a.status, a.text) for r, a in answers.items()} == RESUME_REFUSALS
    assert all(a.retry_after_s == (1 if a.status == 503 else None) for a in answers.values())
    refused = resume_refused("bad_tag")
    assert (refused.status, refused.text, refused.kind) == (400, "invalid resume token", "resume")


def test_every_reason_a_move_fails_for_here_has_an_answer():
    here = set(FAILURE_REASONS) - {"unclaimed", "not_switched"}  # those are the owner's
    routed = set(ROUTES) | set(RESUME_TOKEN_ERROR_REASONS)
    assert here == routed | set(RESUME_REFUSALS)


# -- the order: cheapest and least trusting first --------------------------------------------------
def test_each_step_refuses_before_the_next_is_asked():
    server = Server(max_sessions=1)
    server.sessions["live"] = object()
    adm = admission(server, token="s3cret", rate=RateLimiter(1.0, 1), per_client=1)
    bad = request(content_type="text/plain", content_length=MAX_SDP_BYTES + 1)
    steps = [
        bad,
        request(authorization="Bearer s3cret", content_type="text/plain", content_length=10**6),
        request(authorization="Bearer s3cret", content_length=10**6),
        request(authorization="Bearer s3cret"),
    ]
    assert [v.reason for v in decided(adm, *steps)] == [
        "missing",
        "content_type",
        "too_large",
        "max_sessions",
    ]
    assert server.asked == [0], "capacity is asked once, after the head's own checks"
    assert len(adm.rate) == 0, "a refusal for capacity spends no rate"
    server.sessions.clear()
    server.max_sessions = 10
    ok = request(authorization="Bearer s3cret")
    assert [getattr(v, "reason", "admit") for v in decided(adm, ok, ok)] == [
        "admit",
        "client_rate",
    ]
    assert adm.pending == 1, "a refused offer holds no place"


def test_the_rate_is_spent_before_the_per_client_limit_is_asked():
    adm = admission(rate=RateLimiter(1.0, 3), per_client=1)
    verdicts = decided(adm, *[request()] * 4)
    assert [getattr(v, "reason", "admit") for v in verdicts] == [
        "admit",
        "client_sessions",
        "client_sessions",
        "client_rate",
    ]


def test_offers_admitted_count_against_capacity_until_they_settle():
    server = Server(max_sessions=2)
    adm = admission(server)
    first, second, third = decided(adm, request(), request(), request())
    assert isinstance(first, Admit) and isinstance(second, Admit)
    assert third.reason == "max_sessions", "two offers in flight fill two places"
    assert server.asked == [0, 1, 2]
    adm.settle(first, None)  # its offer was bad: its place is free again
    adm.settle(second, "s2")
    server.sessions["s2"] = object()  # ...and the other became a session
    assert isinstance(adm.decide(request(), NOW, UNIX_NOW), Admit) and adm.pending == 1


def test_a_session_in_the_table_gives_its_pending_place_back_at_once():
    """While the first offer's session is being answered it is in the server's table: counted
    there and still pending, a second offer at a limit of 2 would be refused for no one."""
    server = Server(max_sessions=2)
    adm = admission(server)
    (first,) = decided(adm, request())
    server.sessions["s1"] = object()  # create_session put it in the table...
    adm.registered()  # ...and said so
    (second,) = decided(adm, request())
    assert isinstance(second, Admit), "one session and one offer fit a limit of 2"
    adm.settle(first, "s1", registered=True)
    assert adm.pending == 1
    (third,) = decided(adm, request())
    assert third.reason == "max_sessions"


def test_a_moving_call_refused_for_capacity_is_told_to_try_another_pod_now():
    server = Server()
    adm = admission(server)
    server.draining = True
    refused = adm.decide(request(resume=resume_token()), NOW, UNIX_NOW)
    assert (refused.reason, refused.retry_after_s) == ("draining", 0)
    server.draining, server.max_sessions = False, 0
    refused = adm.decide(request(resume=resume_token()), NOW, UNIX_NOW)
    assert (refused.reason, refused.retry_after_s) == ("max_sessions", 1)


def test_the_rate_refills_with_the_time_passed_in():
    adm = admission(rate=RateLimiter(1.0, 1))
    assert isinstance(adm.decide(request(), NOW, UNIX_NOW), Admit)
    assert adm.decide(request(), NOW + 0.5, UNIX_NOW).reason == "client_rate"
    assert isinstance(adm.decide(request(), NOW + 1.0, UNIX_NOW), Admit)


# -- who the client is (step 5) -----------------------------------------------------------------
def test_the_client_is_its_subject_else_its_address_behind_trusted_proxies_only():
    adm = admission(signed=True)
    token = f"Bearer {mint(SECRET, UNIX_NOW, 60, subject='alice')}"
    facts = {"authorization": token, "user_agent": "x" * 300, "region": "eu"}
    direct = adm.decide(request(forwarded_for="203.0.113.1", **facts), NOW, UNIX_NOW)
    assert (direct.address, direct.key, direct.region) == ("198.51.100.7", "sub:alice", None)
    assert direct.metadata == {"user_agent": "x" * 200, "subject": "alice"}
    proxied = adm.decide(
        request(peer="10.1.2.3", forwarded_for="203.0.113.1", **facts), NOW, UNIX_NOW
    )
    assert (proxied.address, proxied.region) == ("203.0.113.1", "eu")
    anonymous = admission().decide(request(), NOW, UNIX_NOW)
    assert anonymous.key == "addr:198.51.100.7" and "subject" not in anonymous.metadata
    assert anonymous.received_at == NOW
