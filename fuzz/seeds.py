"""Write the seed corpora under fuzz/corpus/<target>/ (deterministic; the files are committed).

    python -m fuzz.seeds

Seeds are what the targets meet in production, so that mutation starts from deep inside the
formats: the RFC 5769 vectors (tests/support/rfc5769.py), Binding requests carrying signed
hints as a browser sends them, relay encapsulations, DTLS/RTP/RTCP first bytes, and scripts that
authenticate clients before sending media (fuzz/script.py's format).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from common import encap, stun
from common.hint import Keyring, sign_hint
from fuzz import script, stunref
from fuzz.fixtures import HINT_SECRETS, HINT_T0_S, STUN_KEY
from relay.framing import frame
from tests.support.rfc5769 import VECTORS

CORPUS = Path(__file__).resolve().parent / "corpus"

DTLS_CLIENT_HELLO = bytes.fromhex("16fefd0000000000000000006c010000600000000000000060fefd")
DTLS_CLIENT_HELLO += bytes(32)
RTP = bytes.fromhex("806f1234000000a0deadbeef") + bytes(40)
RTCP_SR = bytes.fromhex("80c80006deadbeef") + bytes(20)
SRTCP_RR = bytes.fromhex("81c90007deadbeef") + bytes(24)


def _request(attribute: bytes) -> bytes:
    header = struct.pack("!HHI", stun.BINDING_REQUEST, len(attribute), stun.MAGIC_COOKIE)
    return header + bytes(range(12)) + attribute


AIOICE_STRUCT_ERROR = {
    # Accepted by common.stun.parse, raise struct.error in aioice.stun.parse_message (found by
    # the aioice and media_socket targets; kept as regression seeds).
    "aioice-priority-2-bytes": _request(struct.pack("!HH", 0x0024, 2) + b"\xab\xcd\0\0"),
    "aioice-ice-controlling-4-bytes": _request(struct.pack("!HH", 0x802A, 4) + bytes(4)),
    "aioice-channel-number-empty": _request(struct.pack("!HH", 0x000C, 0)),
}


def txid(n: int) -> bytes:
    return hashlib.sha256(b"txid%d" % n).digest()[:12]


def hints() -> list[str]:
    found = []
    for i, key_id in enumerate(sorted(HINT_SECRETS)):
        ring = Keyring(HINT_SECRETS, key_id)
        nonce = bytes([i + 1]) * 7
        found.append(sign_hint(ring, i, 100 * i + 1, HINT_T0_S, nonce))
    ring = Keyring(HINT_SECRETS, 0)
    found.append(sign_hint(ring, 9, 65535, HINT_T0_S - 5 * 3600, b"expired"))
    found.append(sign_hint(ring, 9, 0, HINT_T0_S + 3600, b"future!"))
    return found


def stun_seeds() -> dict[str, bytes]:
    seeds = {f"rfc5769-{name}": data for name, data in VECTORS.items()}
    for i, ufrag in enumerate(hints()[:3]):
        username = f"{ufrag}:Xy7q"
        seeds[f"check-hint-{i}"] = stun.binding_request(username, txid(i), STUN_KEY)
        seeds[f"check-hint-{i}-controlled"] = stun.binding_request(
            username, txid(i + 10), STUN_KEY, controlling=False, tie_breaker=2**63 + i
        )
    seeds["check-no-integrity"] = stun.binding_request("a:b", txid(20))
    seeds["check-long-username"] = stun.binding_request("u" * 256 + ":" + "p" * 255, txid(21))
    seeds["check-utf8-username"] = stun.binding_request("ユーザー:ピア", txid(22), STUN_KEY)
    seeds["success-v4"] = stun.binding_success(txid(30), ("192.0.2.1", 32853), STUN_KEY)
    seeds["success-v6"] = stun.binding_success(txid(31), ("2001:db8::1", 3478), STUN_KEY)
    seeds["indication"] = stun.build(stun.BINDING_INDICATION, txid(32), [], None)
    username = struct.pack("!HH", stun.ATTR_USERNAME, 3) + b"a:b\0"
    with_sha256 = (
        username
        + struct.pack("!HH", stun.ATTR_MESSAGE_INTEGRITY, 20)
        + bytes(20)
        + struct.pack("!HH", stun.ATTR_MESSAGE_INTEGRITY_SHA256, 32)
        + bytes(range(32))
        + struct.pack("!HH", stun.ATTR_FINGERPRINT, 4)
        + bytes(4)
    )
    header = struct.pack("!HHI", stun.BINDING_REQUEST, 0, stun.MAGIC_COOKIE) + txid(33)
    seeds["check-mi-sha256"] = stunref.repair(header + with_sha256, STUN_KEY)
    seeds["header-only"] = header[:2] + b"\0\0" + header[4:8] + txid(34)
    seeds.update(AIOICE_STRUCT_ERROR)
    seeds["dtls-client-hello"] = DTLS_CLIENT_HELLO
    seeds["rtp"] = RTP
    seeds["rtcp-sr"] = RTCP_SR
    return seeds


def hint_seeds() -> dict[str, bytes]:
    seeds = {f"hint-{i}": ufrag.encode() for i, ufrag in enumerate(hints())}
    good = hints()[0]
    seeds["hint-short"] = good[:-1].encode()
    seeds["hint-padded"] = (good[:-2] + "==").encode()
    seeds["hint-non-ascii"] = (good[:-1] + "é").encode()
    seeds["hint-urlsafe"] = good.replace("+", "-").replace("/", "_").encode()
    # Round-trip fields (fuzz_hint.round_trip): key, cluster, tid, minutes, s, frac, nonce, ...
    minutes = int(HINT_T0_S // 60).to_bytes(4, "big")
    seeds["fields-in-range"] = bytes([0, 3, 0, 42]) + minutes + bytes([30, 128]) + b"nonce!!"
    seeds["fields-wild"] = bytes([1, 255, 255, 255]) + bytes(4) + bytes(15) + bytes([15, 9])
    seeds["fields-nan-time"] = bytes(22) + bytes([8, 0]) + struct.pack("!d", float("nan"))
    return seeds


def encap_seeds() -> dict[str, bytes]:
    check = stun.binding_request(f"{hints()[0]}:Xy7q", txid(40), STUN_KEY)
    seeds = {
        "v4-check": encap.encapsulate(check, "198.51.100.7", 50000),
        "v6-check": encap.encapsulate(check, "2001:db8::7", 50000),
        "v4-rtp": encap.encapsulate(RTP, "203.0.113.9", 3478, hop_limit=1),
        "v6-dtls": encap.encapsulate(DTLS_CLIENT_HELLO, "::ffff:192.0.2.1", 1, flags=0x80),
        "v4-header-only": encap.encode_header("0.0.0.0", 0, hop_limit=0),
        "v6-header-only": encap.encode_header("ff02::1", 65535, hop_limit=255, flags=255),
        "bad-magic": b"\xfe" + encap.encapsulate(RTP, "192.0.2.1", 9)[1:],
        "bad-version": bytes([0xFF, 0x24]) + encap.encapsulate(RTP, "192.0.2.1", 9)[2:],
        "bad-family": bytes([0xFF, 0x15]) + encap.encapsulate(RTP, "192.0.2.1", 9)[2:],
        "v6-truncated": encap.encode_header("2001:db8::1", 1)[:15],
        "text-v6-scoped": b"fe80::1%eth0",
    }
    return seeds


def step(kind: int, arg: int, source: int, body: bytes = b"", relay: int | None = None) -> bytes:
    """One step of a fuzz/script.py script."""
    op = kind | (0x08 | relay << 4 if relay is not None else 0)
    return bytes([op, arg, source, len(body)]) + body


def script_seeds() -> dict[str, bytes]:
    """Scripts, each with the transceiver knowing its relays' networks or not (first byte)."""
    return {name: bytes([i % 2]) + steps for i, (name, steps) in enumerate(_scripts().items())}


def _scripts() -> dict[str, bytes]:
    s = script
    check = s.CHECK
    return {
        "relay-check-then-media": step(check, 0, 0, txid(50), relay=0)
        + step(s.RAW, 0, 0, RTP, relay=0)
        + step(s.RAW, 0, 0, DTLS_CLIENT_HELLO, relay=0)
        + step(s.CONTROL, 0, 3),
        "direct-ipv6-then-rebinding": step(check, 1, 8, txid(51))
        + step(s.RAW, 0, 8, RTP)
        + step(check, 1, 1, txid(52))
        + step(s.RAW, 0, 8, RTCP_SR)
        + step(check, 1, 8, txid(53))
        + step(s.CONTROL, 1, 1),
        "relay-change": step(check, 2, 2, txid(54), relay=0)
        + step(s.RAW, 0, 2, SRTCP_RR, relay=1)
        + step(check, 2, 2, txid(55), relay=1)
        + step(s.CONTROL, 2, 2),
        "wrong-credentials": step(s.CROSS, 0x01, 7, txid(56))
        + step(s.CROSS, 0x42, 7, txid(57), relay=1)
        + step(s.FLIP, 0, 7, txid(58) + bytes([30, 0x20]))
        + step(s.NO_FINGERPRINT, 0, 7, txid(59))
        + step(s.RESPONSE, 0, 7, txid(60))
        + step(s.RAW, 0, 7, RTP),
        "move-back-with-check": step(check, 0, 0, txid(61), relay=0)
        + step(check, 0, 1, txid(62), relay=0)
        + step(s.NO_FINGERPRINT, 0, 0, txid(63), relay=0)
        + step(s.RESPONSE, 0, 0, txid(64), relay=1)
        + step(s.RAW, 0, 1, RTP, relay=0),
        "attributes": step(
            s.ATTRIBUTES,
            1,
            9,
            txid(65)
            + struct.pack("!HB", stun.ATTR_PRIORITY, 4)
            + b"\x6e\x7f\x1e\xff"
            + struct.pack("!HB", stun.ATTR_USE_CANDIDATE, 0)
            + struct.pack("!HB", stun.ATTR_SOFTWARE, 5)
            + b"fuzz!",
            relay=1,
        )
        + step(s.RAW, 0, 9, VECTORS["2.1"], relay=1),
        "session-end-and-restart": step(check, 0, 0, txid(66))
        + step(s.CONTROL, 0x06, 0)  # end session 0
        + step(s.RAW, 0, 0, RTP)
        + step(s.CONTROL, 0x09, 0)  # start it again, with a new password
        + step(check, 0, 0, txid(67))
        + step(check, 0, 1, txid(68))  # the client moves: address 0 is left behind
        + step(s.CONTROL, 0x7C, 0)  # 35 s pass (demux target): address 0 falls silent
        + step(s.CONTROL, 0x7C, 0)  # 35 s more: it expires
        + step(s.RAW, 0, 0, RTP),
        "many-addresses": b"".join(step(check, 0, i, txid(70 + i)) for i in range(12))
        + step(s.RAW, 0, 0, RTP)
        + step(s.CONTROL, 0, 0),
        "aioice-struct-error-from-a-learned-address": step(check, 0, 0, txid(80), relay=0)
        + step(s.RAW, 0, 0, AIOICE_STRUCT_ERROR["aioice-priority-2-bytes"], relay=0),
        # Found by fuzzing (fixed in 29a43af): a datagram straight from the latched client's
        # address, not through a relay, moved the session's path off its relay without a check.
        "direct-datagram-from-a-relayed-client": step(check, 0, 0, txid(81), relay=0)
        + step(s.RAW, 0, 0, b"\x80\x00spoofed")
        + step(s.CONTROL, 0, 0),
        "direct-encap-and-noise": step(s.RAW, 0, 7, encap.encapsulate(RTP, "198.51.100.1", 40000))
        + step(s.RAW, 0, 7, b"\xff\x14\x04")
        + step(s.RAW, 0, 7, b"")
        + step(s.RAW, 0, 11, VECTORS["2.4"]),
    }


def framing_seeds() -> dict[str, bytes]:
    """Frame limit 2047 (byte 0: (2047 - 20) // 8), read sizes, then an ICE-TCP stream."""
    head = bytes([(2047 - 20) // 8]) + bytes([0, 1, 2, 19, 99, 255, 7, 3])
    check = stun.binding_request("hintufrag:cli", bytes(12), integrity_key=STUN_KEY)
    media = frame(check) + frame(DTLS_CLIENT_HELLO) + frame(RTP) + frame(RTCP_SR)
    return {
        "ice-tcp-call": head + media,
        "zero-length": head + frame(RTP) + b"\0\0" + frame(RTP),
        "oversize": head + frame(check) + b"\x08\x00" + bytes(64),
        "half-frame": head + frame(check) + frame(RTP)[:20],
        "small-limit": bytes([0]) + head[1:] + frame(bytes(20)) + frame(bytes(21)),
    }


def write(target: str, seeds: dict[str, bytes]) -> None:
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, data in seeds.items():
        (directory / name).write_bytes(data)
    print(f"{directory.relative_to(CORPUS.parent.parent)}: {len(seeds)} seeds")


def main() -> None:
    write("stun", stun_seeds())
    write("aioice", stun_seeds())
    write("hint", hint_seeds())
    write("encap", encap_seeds())
    write("framing", framing_seeds())
    write("demux", script_seeds())
    write("media_socket", script_seeds())


if __name__ == "__main__":
    main()
