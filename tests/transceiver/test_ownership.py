"""transceiver.ownership: which transceiver answers for a WHIP resource id, with no I/O."""

from __future__ import annotations

from common.hint import Keyring
from common.sessionid import sign_session_id
from common.verdict import Refuse
from transceiver.ownership import REFUSAL_REASONS, Forward, Local, Peers, SessionRouter

RING = Keyring({0: bytes(range(32))}, 0)
NOW_S = 1_750_000_000.0
CALL = "00112233445566778899aabbccddeeff"
MAX_AGE_S = 3660.0


def router(tid: int = 0, peers: Peers | None = None, ring: Keyring = RING) -> SessionRouter:
    return SessionRouter(ring, 1, tid, peers or Peers({}), MAX_AGE_S)


def sid(tid: int, cluster: int = 1, ring: Keyring = RING, now_s: float = NOW_S) -> str:
    return sign_session_id(ring, cluster, tid, now_s, CALL)


def test_own_ids_are_local_and_name_the_call():
    assert router(0).route(sid(0), NOW_S, forwarded=False) == Local(CALL)
    assert router(0).route(sid(0), NOW_S, forwarded=True) == Local(CALL), "the forwarded one"


def test_another_owner_is_forwarded_to_the_configured_address_only():
    peers = Peers({2: ("10.0.0.2", 8080)}, "trx-{id}.headless.ns.svc.cluster.local:8080")
    r = router(0, peers)
    assert r.route(sid(2), NOW_S, False) == Forward(2, ("10.0.0.2", 8080)), "static first"
    assert r.route(sid(5), NOW_S, False) == Forward(
        5, ("trx-5.headless.ns.svc.cluster.local", 8080)
    )
    assert Peers({}, "[fd00::{id}]:80").address(7) == ("fd00::7", 80)


def test_a_forwarded_request_is_never_forwarded_again():
    r = router(0, Peers({2: ("10.0.0.2", 8080)}))
    assert r.route(sid(2), NOW_S, forwarded=True) == Refuse("looped")


def test_no_peer_configured_is_refused_as_rtcedge_up_runs_one_transceiver():
    assert router(0).route(sid(2), NOW_S, False) == Refuse("no_peer")


def test_forged_tampered_foreign_and_old_ids_are_refused_with_a_reason():
    r = router(0, Peers({}, "trx-{id}:8080"))
    good = sid(2)
    tampered = good[:10] + ("A" if good[10] != "A" else "B") + good[11:]
    forged = sid(2, ring=Keyring({0: b"f" * 32}, 0))
    cases = {
        "0" * 32: "malformed",
        tampered: "bad_tag",
        forged: "bad_tag",
        sid(2, cluster=9): "cluster",
        sid(2, now_s=NOW_S - MAX_AGE_S - 120): "expired",
        sid(2, now_s=NOW_S + 3600): "future",
        sid(2, ring=Keyring({3: b"k" * 32}, 3)): "unknown_key",
    }
    for text, reason in cases.items():
        assert r.route(text, NOW_S, False) == Refuse(reason), reason
        assert reason in REFUSAL_REASONS
