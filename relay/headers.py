"""The encapsulation header on the relay's side: written once per flow, read per batch.

Both derive from common.encap's layout and relay.mmsg's sockaddr layout; no offset is written
here twice.

- Client -> transceiver: each flow's header sits in memory the kernel reads through an iovec.
  A flow's *send descriptor* is two words, the transceiver's sockaddr pointer and its header's
  pointer; the hot path joins the descriptors of a batch with one ``bytes.join``. Confirmed
  flows' headers live at their journal slot (freeing the slot frees both); one scratch header
  per batch entry serves the packets of pending flows.
- Transceiver -> client: ``address_fields`` says where a received header's client port and
  address go in the destination sockaddr; ``address_copy_plan`` says it in 16-bit words, so the
  batch path copies a whole batch's client addresses with a few strided slices.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Hashable

from common import encap
from relay.addrkey import AddressKeys
from relay.mmsg import ADDR_SLICE, PORT_SLICE
from relay.routing import Target

# A send descriptor: the transceiver's sockaddr pointer and the header's pointer.
WIRE = struct.Struct("=QQ")
HEADER_STRIDE = -(-encap.HEADER_LEN_V6 // 8) * 8  # bytes per header slot: the longest, in words


class FlowHeaders:
    """Header memory for ``flow_slots`` confirmed flows and ``batch`` scratch entries."""

    def __init__(self, keys: AddressKeys, flow_slots: int, batch: int) -> None:
        self.keys = keys
        self.header_len = encap.HEADER_LEN[keys.ip_version]
        self._flows = (ctypes.c_char * (flow_slots * HEADER_STRIDE))()
        self._flows_addr = ctypes.addressof(self._flows)
        self._scratch = (ctypes.c_char * (batch * HEADER_STRIDE))()
        self._scratch_addr = ctypes.addressof(self._scratch)

    def flow_wire(self, key: Hashable, target: Target, slot: int) -> bytes:
        """The send descriptor of a confirmed flow in journal slot ``slot``, packed once."""
        return self._wire(self._flows_addr + slot * HEADER_STRIDE, key, target)

    def entry_wire(self, key: Hashable, target: Target, entry: int) -> bytes:
        """The send descriptor of an admitted first packet in batch entry ``entry``."""
        return self._wire(self._scratch_addr + entry * HEADER_STRIDE, key, target)

    def _wire(self, addr: int, key: Hashable, target: Target) -> bytes:
        port, address = self.keys.port_and_address(key)
        header = encap.encode_header_packed(
            self.keys.ip_version, address, int.from_bytes(port, "big")
        )
        ctypes.memmove(addr, header, len(header))
        return WIRE.pack(target.ptr, addr)


def address_fields(family: int) -> tuple[tuple[int, int, int], ...]:
    """(sockaddr offset, header offset, length) of the client port and of the client address:
    where a header's fields go in a destination sockaddr of ``family``."""
    addr_off, addr_len = ADDR_SLICE[family]
    return (
        (PORT_SLICE[0], encap.PORT_OFFSET, encap.PORT_LEN),
        (addr_off, encap.ADDRESS_OFFSET, addr_len),
    )


def address_copy_plan(family: int) -> list[tuple[int, int]]:
    """``address_fields`` in 16-bit words, (destination, source): what the batch path copies
    with one strided slice each."""
    plan = []
    for dst, src, length in address_fields(family):
        if dst % 2 or src % 2 or length % 2:
            raise ValueError("a 16-bit copy plan needs even offsets and lengths")
        plan += [((dst + j) // 2, (src + j) // 2) for j in range(0, length, 2)]
    return plan
