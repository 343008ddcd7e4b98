"""The STUN test vectors of RFC 5769 section 2, with their keys: for the STUN tests and the
fuzzers' seeds."""

import hashlib
import stringprep
import unicodedata


def _hex(text: str) -> bytes:
    """Vector bytes written as in the RFC: hex words, comments after '#'."""
    return bytes.fromhex("".join(line.split("#")[0] for line in text.splitlines()))


# RFC 5769 section 2. Every byte is covered by the checks in tests/common/test_stun.py: 2.1-2.3 by
# FINGERPRINT and MESSAGE-INTEGRITY, 2.4 by MESSAGE-INTEGRITY (it has no FINGERPRINT).
RFC5769_PASSWORD = b"VOkJxbRl1RmTxUk/WvJxBt"
RFC5769_TRANSACTION_ID = bytes.fromhex("b7e7a701bc34d686fa87dfae")

RFC5769_2_1_REQUEST = _hex(
    """
    00010058 2112a442                   # Binding request, length 88, magic cookie
    b7e7a701 bc34d686 fa87dfae          # transaction id
    80220010                            # SOFTWARE, 16 bytes
    5354554e 20746573 7420636c 69656e74 #   "STUN test client"
    00240004 6e0001ff                   # PRIORITY
    80290008 932ff9b1 51263b36          # ICE-CONTROLLED, tie breaker
    00060009 6576746a 3a683676 59202020 # USERNAME "evtj:h6vY", padded with spaces
    00080014                            # MESSAGE-INTEGRITY
    9aeaa70c bfd8cb56 781ef2b5 b2d3f249 c1b571a2
    80280004 e57a3bcf                   # FINGERPRINT
    """
)

RFC5769_2_2_IPV4_RESPONSE = _hex(
    """
    0101003c 2112a442                   # Binding success, length 60, magic cookie
    b7e7a701 bc34d686 fa87dfae          # transaction id
    8022000b 74657374 20766563 746f7220 # SOFTWARE "test vector", padded with a space
    00200008 0001a147 e112a643          # XOR-MAPPED-ADDRESS 192.0.2.1:32853
    00080014                            # MESSAGE-INTEGRITY
    2b91f599 fd9e90c3 8c7489f9 2af9ba53 f06be7d7
    80280004 c07d4c96                   # FINGERPRINT
    """
)

RFC5769_2_3_IPV6_RESPONSE = _hex(
    """
    01010048 2112a442                   # Binding success, length 72, magic cookie
    b7e7a701 bc34d686 fa87dfae          # transaction id
    8022000b 74657374 20766563 746f7220 # SOFTWARE "test vector", padded with a space
    00200014 0002a147                   # XOR-MAPPED-ADDRESS, IPv6, port 32853
    0113a9fa a5d3f179 bc25f4b5 bed2b9d9 #   2001:db8:1234:5678:11:2233:4455:6677
    00080014                            # MESSAGE-INTEGRITY
    a382954e 4be67bf1 1784c97c 8292c275 bfe3ed41
    80280004 c8fb0b4c                   # FINGERPRINT
    """
)

RFC5769_2_4_LONG_TERM_REQUEST = _hex(
    """
    00010060 2112a442                   # Binding request, length 96, magic cookie
    78ad3433 c6ad72c0 29da412e          # transaction id
    00060012                            # USERNAME, 18 bytes (six katakana), 2 bytes padding
    e3839ee3 8388e383 aae38383 e382afe3 82b90000
    0015001c                            # NONCE "f//499k954d6OL34oL9FSTvy64sA"
    662f2f34 39396b39 35346436 4f4c3334 6f4c3946 53547679 36347341
    0014000b 6578616d 706c652e 6f726700 # REALM "example.org", 1 byte padding
    00080014                            # MESSAGE-INTEGRITY
    f6702465 6dd64a3e 02b8e071 2e85c9a2 8ca89666
    """
)

RFC5769_2_4_USERNAME = "\u30de\u30c8\u30ea\u30c3\u30af\u30b9"
RFC5769_2_4_PASSWORD_RAW = "The\u00adM\u00aatr\u2168"
RFC5769_2_4_REALM = "example.org"

VECTORS = {
    "2.1": RFC5769_2_1_REQUEST,
    "2.2": RFC5769_2_2_IPV4_RESPONSE,
    "2.3": RFC5769_2_3_IPV6_RESPONSE,
    "2.4": RFC5769_2_4_LONG_TERM_REQUEST,
}


def saslprep_for_vector(text: str) -> str:
    """The parts of SASLprep (RFC 4013 2.1-2.2) that this vector exercises: map B.1 to nothing,
    C.1.2 to space, then NFKC. Enough to derive the RFC's "TheMatrIX"; not a full SASLprep."""
    mapped = "".join(
        "" if stringprep.in_table_b1(c) else " " if stringprep.in_table_c12(c) else c for c in text
    )
    return unicodedata.normalize("NFKC", mapped)


def long_term_key() -> bytes:
    """RFC 8489 9.2.2: key = MD5(username ":" realm ":" SASLprep(password))."""
    password = saslprep_for_vector(RFC5769_2_4_PASSWORD_RAW)
    return hashlib.md5(f"{RFC5769_2_4_USERNAME}:{RFC5769_2_4_REALM}:{password}".encode()).digest()


def key_for(name: str) -> bytes:
    """The key that checks the MESSAGE-INTEGRITY of vector ``name``."""
    return long_term_key() if name == "2.4" else RFC5769_PASSWORD
