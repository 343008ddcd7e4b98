"""Target ``hint``: the routing-hint verifier and a sign -> verify round trip (common.hint).

Each input is used twice:

1. as a ufrag (UTF-8, else Latin-1 text) given to ``verify_hint`` and to a ``HintVerifier`` at
   several clock readings. Findings: any exception but HintError, a reason outside
   HINT_ERROR_REASONS, the cached verifier disagreeing with ``verify_hint``, an accepted ufrag
   that is not exactly what ``sign_hint`` makes of its fields (malleability), a cached hint that
   survives the removal of its key.
2. as the fields of a hint (key, cluster, transceiver id, time, nonce; sometimes out of range):
   ``sign_hint`` must return or raise ValueError; what it returns must verify to the same fields,
   age out exactly as documented, and stop verifying after any one-character change.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import atheris

from fuzz.fixtures import HINT_SECRETS, HINT_T0_S
from fuzz.harness import main, require

with atheris.instrument_imports(include=["common"]):
    from common import hint
    from common.hint import HintError, HintVerifier, Keyring, RoutingHint

SECRETS = HINT_SECRETS
RINGS = {key_id: Keyring(SECRETS, key_id) for key_id in SECRETS}
RING = RINGS[0]
KEY_IDS = tuple(SECRETS)
T0_S = HINT_T0_S
MAX_AGE_S = 4 * 3600 + 60.0
MAX_SKEW_S = 120.0
CLOCKS_S = (T0_S, T0_S + MAX_AGE_S / 2, T0_S + 10 * 86400, T0_S - 86400, T0_S)
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

Outcome = RoutingHint | str


def outcome(call: Callable[[], RoutingHint]) -> Outcome:
    """The hint, or the HintError reason; every other exception propagates as a finding."""
    try:
        return call()
    except HintError as exc:
        require(exc.reason in hint.HINT_ERROR_REASONS, f"unknown reason {exc.reason!r}")
        return exc.reason


def expected_age_outcome(issued_at_min: int, now_s: float) -> str | None:
    """docs: older than max_age_s is 'expired', more than max_skew_s ahead is 'future'."""
    age_s = now_s - issued_at_min * 60
    if age_s > MAX_AGE_S:
        return "expired"
    if -age_s > MAX_SKEW_S:
        return "future"
    return None


def check_accepted(ufrag: str, found: RoutingHint, now_s: float) -> None:
    require(expected_age_outcome(found.issued_at_min, now_s) is None, "accepted out of age")
    again = hint.sign_hint(
        RINGS[found.key_id], found.cluster, found.transceiver_id, found.issued_at_s, found.nonce
    )
    require(again == ufrag, "an accepted ufrag is not the canonical signature of its fields")


def verify_as_ufrag(data: bytes) -> None:
    try:
        ufrag = data.decode("utf-8")
    except UnicodeDecodeError:
        ufrag = data.decode("latin-1")
    verifier = HintVerifier(RING, MAX_AGE_S, MAX_SKEW_S, cache_capacity=2)
    accepted = False
    for now_s in CLOCKS_S:
        direct = outcome(lambda now_s=now_s: hint.verify_hint(RING, ufrag, now_s, MAX_AGE_S))
        cached = outcome(lambda now_s=now_s: verifier.verify(ufrag, now_s))
        require(direct == cached, f"HintVerifier says {cached!r}, verify_hint says {direct!r}")
        if isinstance(direct, RoutingHint):
            check_accepted(ufrag, direct, now_s)
            accepted = True
    if accepted:
        key_id = base64.b64decode(ufrag)[0] & 0x0F
        others = {k: v for k, v in SECRETS.items() if k != key_id}
        verifier.replace_keyring(Keyring(others, next(iter(others))))
        dropped = outcome(lambda: verifier.verify(ufrag, T0_S))
        require(dropped == "unknown_key", f"dropped key still verifies: {dropped!r}")


def round_trip(data: bytes) -> None:
    b = data[:32].ljust(32, b"\0")
    wild = b[22]
    key_id = KEY_IDS[b[0] % len(KEY_IDS)]
    cluster = b[1] if not wild & 1 else (b[1] + 256 if b[1] & 1 else -1 - b[1])
    transceiver_id = int.from_bytes(b[2:4], "big")
    if wild & 2:
        transceiver_id = transceiver_id + 0x10000 if b[2] & 1 else -1 - transceiver_id
    nonce = b[10:17] if not wild & 4 else b[10 : 10 + b[23] % 12]
    now_s = int.from_bytes(b[4:8], "big") * 60 + b[8] % 60 + b[9] / 256
    if wild & 8:
        (now_s,) = struct.unpack("!d", b[24:32])
    in_range = 0 <= cluster <= 0xFF and 0 <= transceiver_id <= 0xFFFF and len(nonce) == 7
    try:
        ufrag = hint.sign_hint(RINGS[key_id], cluster, transceiver_id, now_s, nonce)
    except ValueError:
        require(not in_range or wild & 8, "sign_hint refused fields in range")
        return
    require(in_range, "sign_hint accepted fields out of range")
    require(len(ufrag) == hint.HINT_LEN_CHARS, "ufrag length")
    require(all(c in ALPHABET for c in ufrag), "ufrag outside the ice-char alphabet")

    issued_at_min = int(now_s // 60)
    want = RoutingHint(key_id, cluster, transceiver_id, issued_at_min, bytes(nonce))
    got = outcome(lambda: hint.verify_hint(RING, ufrag, now_s, MAX_AGE_S))
    require(got == want, f"round trip gave {got!r}, want {want!r}")

    later_s = now_s + int.from_bytes(b[17:20], "big", signed=True)
    got = outcome(lambda: hint.verify_hint(RING, ufrag, later_s, MAX_AGE_S))
    expected = expected_age_outcome(issued_at_min, later_s)
    require(got == (expected or want), f"at {later_s}: {got!r}, expected {expected or want!r}")

    pos, char = b[20] % len(ufrag), ALPHABET[b[21] % 64]
    if ufrag[pos] != char:
        forged = ufrag[:pos] + char + ufrag[pos + 1 :]
        got = outcome(lambda: hint.verify_hint(RING, forged, now_s, MAX_AGE_S))
        require(isinstance(got, str), f"a one-character change still verifies: {forged}")

    others = {k: v for k, v in SECRETS.items() if k != key_id}
    without = Keyring(others, next(iter(others)))
    got = outcome(lambda: hint.verify_hint(without, ufrag, now_s, MAX_AGE_S))
    require(got == "unknown_key", f"verified without its key: {got!r}")
    wrong = Keyring({**SECRETS, key_id: SECRETS[key_id][::-1]}, key_id)
    got = outcome(lambda: hint.verify_hint(wrong, ufrag, now_s, MAX_AGE_S))
    require(got == "bad_tag", f"verified with another secret: {got!r}")


def test_one_input(data: bytes) -> None:
    verify_as_ufrag(data)
    round_trip(data)


if __name__ == "__main__":
    main(test_one_input)
