"""Target ``encap``: the relay <-> transceiver encapsulation header (common.encap).

Each input is used twice:

1. as a received datagram: ``decode_packed`` and ``decode_header`` must raise nothing but
   EncapError, agree with each other, and describe a header that re-encodes to the same bytes;
2. as header fields (family, address bytes, port, hop limit, flags, sometimes out of range) and a
   payload: encoding must return or raise EncapError, never lose or change a field, and the
   payload must come back at the decoded offset. The textual encoder gets the address as text and
   an arbitrary string.
"""

from __future__ import annotations

import ipaddress

import atheris

from fuzz.harness import Finding, main, require

with atheris.instrument_imports(include=["common"]):
    from common import encap
    from common.encap import EncapError


def decode_datagram(data: bytes) -> None:
    try:
        family, packed, port, hop_limit, offset = encap.decode_packed(data)
    except EncapError:
        try:
            encap.decode_header(data)
        except EncapError:
            return
        raise Finding("decode_header accepts what decode_packed rejects") from None
    require(family in (4, 6), "family")
    require(offset == (encap.HEADER_LEN_V4 if family == 4 else encap.HEADER_LEN_V6), "offset")
    require(len(packed) == (4 if family == 4 else 16) and offset <= len(data), "address length")
    require(0 <= port <= 0xFFFF and 0 <= hop_limit <= 0xFF, "port or hop limit range")
    fields = (family, packed, port, hop_limit, offset)
    require(encap.decode_packed(memoryview(data)) == fields, "memoryview decodes differently")
    header, offset2 = encap.decode_header(data)
    require(offset2 == offset == header.header_len, "decode_header offset")
    readable = (header.family, header.client_port, header.hop_limit)
    require(readable == (family, port, hop_limit), "decode_header fields")
    require(ipaddress.ip_address(header.client_ip).packed == packed, "decode_header address")
    require(header.flags == data[3], "flags")
    again = encap.encode_header_packed(family, packed, port, hop_limit, data[3])
    require(again == data[:offset], "packed header does not re-encode to the same bytes")
    again = encap.encode_header(header.client_ip, port, hop_limit, header.flags)
    require(again == data[:offset], "textual header does not re-encode to the same bytes")


def encode_fields(data: bytes) -> None:
    b = data[:32].ljust(32, b"\0")
    wild = b[0]
    family = (4, 6, b[1])[b[1] % 3]
    packed = b[2:6] if family == 4 else b[2:18]
    if wild & 1:
        packed = b[2 : 2 + b[18] % 20]
    port = int.from_bytes(b[19:21], "big")
    if wild & 2:
        port = port + 0x10000 if b[19] & 1 else -1 - port
    hop_limit = b[21] if not wild & 4 else b[21] + 256
    flags = b[22] if not wild & 8 else -1 - b[22]
    payload = data[32:]
    valid = (
        (family, len(packed)) in ((4, 4), (6, 16))
        and 0 <= port <= 0xFFFF
        and 0 <= hop_limit <= 0xFF
        and 0 <= flags <= 0xFF
    )
    try:
        header = encap.encode_header_packed(family, packed, port, hop_limit, flags)
    except EncapError:
        require(not valid, "encode_header_packed refused valid fields")
        return
    require(valid, "encode_header_packed accepted invalid fields")
    datagram = header + payload
    decoded = encap.decode_packed(datagram)
    require(decoded == (family, packed, port, hop_limit, len(header)), "packed round trip")
    require(datagram[len(header) :] == payload, "payload moved")

    text = str(ipaddress.ip_address(packed))
    require(encap.encapsulate(payload, text, port, hop_limit, flags) == datagram, "encapsulate")
    parsed, offset = encap.decode_header(datagram)
    require((parsed.client_ip, parsed.client_port, parsed.flags) == (text, port, flags), "text")
    require(offset == len(header), "decode_header offset")


def encode_text(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        header = encap.encode_header(text, 3478)
    except EncapError:
        return
    parsed, _ = encap.decode_header(header)
    address = ipaddress.ip_address(text)  # the encoder accepted it, so it is an address
    require(ipaddress.ip_address(parsed.client_ip).packed == address.packed, "text address")
    require(parsed.family == address.version, "text family")


def test_one_input(data: bytes) -> None:
    decode_datagram(data)
    encode_fields(data)
    encode_text(data)


if __name__ == "__main__":
    main(test_one_input)
