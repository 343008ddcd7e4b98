"""Batched UDP receive and send with recvmmsg(2)/sendmmsg(2) over preallocated buffers.

This is the I/O edge of the relay's hot path. Python's socket module has no batched calls, so we
call libc through ctypes. Every structure (payload slots, source sockaddrs, iovecs, mmsghdrs) is
allocated once; the forwarding loop reads and writes their fields through ``memoryview.cast("Q")``
views, which is several times cheaper per field than ctypes attribute access. Linux x86-64/arm64
(LP64) layouts only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket

# No argtypes: the pointers are passed as prebuilt c_void_p objects and the rest as small ints,
# which ctypes converts without the per-call argtypes machinery (~0.35 us less per call).
_libc = ctypes.CDLL(None, use_errno=True)
_recvmmsg = _libc.recvmmsg
_recvmmsg.restype = ctypes.c_int
_sendmmsg = _libc.sendmmsg
_sendmmsg.restype = ctypes.c_int

MSG_DONTWAIT = 0x40

# struct mmsghdr on LP64: msghdr (56 B) + unsigned msg_len + padding = 64 B = 8 words.
MMSGHDR_WORDS = 8
W_NAME, W_NAMELEN, W_IOV, W_IOVLEN, W_LEN = 0, 1, 2, 3, 7
IOVEC_WORDS = 2  # iov_base, iov_len

SOCKADDR_LEN = {socket.AF_INET: 16, socket.AF_INET6: 28}
# Sockaddrs sit at a word-aligned stride so they can be read as 64-bit words (relay.addrkey).
NAME_STRIDE = {socket.AF_INET: 16, socket.AF_INET6: 32}
# Offset and length of the port (network order, as sin_port and sin6_port hold it) and of the
# address inside the sockaddr.
PORT_SLICE = (2, 2)
ADDR_SLICE = {socket.AF_INET: (4, 4), socket.AF_INET6: (8, 16)}

assert ctypes.sizeof(ctypes.c_void_p) == 8, "relay.mmsg supports LP64 platforms only"


class MmsgError(OSError):
    """A batched socket call failed for a reason other than 'nothing to read'."""


def _words(obj: ctypes.Array) -> memoryview:
    return memoryview(obj).cast("B").cast("Q")


class RecvBatch:
    """Preallocated receive side: ``slots`` payload buffers of ``slot_size`` bytes each.

    After ``recv(fd)`` returns n, packet i is ``data[i * slot_size : i * slot_size + length(i)]``
    and its source sockaddr starts at ``names[i * name_stride]``.
    """

    def __init__(self, family: int, slots: int, slot_size: int = 2048, headroom: int = 0) -> None:
        self.family = family
        self.slots = slots
        self.slot_size = slot_size
        self.name_len = SOCKADDR_LEN[family]
        self.name_stride = NAME_STRIDE[family]
        self._data = (ctypes.c_char * (slots * slot_size))()
        self._names = (ctypes.c_char * (slots * self.name_stride))()
        self._iov = (ctypes.c_uint64 * (slots * IOVEC_WORDS))()
        self._hdrs = (ctypes.c_uint64 * (slots * MMSGHDR_WORDS))()
        self.data_addr = ctypes.addressof(self._data)
        self.data = memoryview(self._data).cast("B")
        self.data_h = self.data.cast("H")  # 16-bit view for strided copies of header fields
        self.names = memoryview(self._names).cast("B")
        self.names_q = self.names.cast("Q")
        self.hdrs = _words(self._hdrs)
        iov = _words(self._iov)
        names_addr = ctypes.addressof(self._names)
        iov_addr = ctypes.addressof(self._iov)
        for i in range(slots):
            iov[i * 2] = self.data_addr + i * slot_size + headroom
            iov[i * 2 + 1] = slot_size - headroom
            h = i * MMSGHDR_WORDS
            self.hdrs[h + W_NAME] = names_addr + i * self.name_stride
            self.hdrs[h + W_NAMELEN] = self.name_len
            self.hdrs[h + W_IOV] = iov_addr + i * 16
            self.hdrs[h + W_IOVLEN] = 1
        self._hdrs_ptr = ctypes.c_void_p(ctypes.addressof(self._hdrs))

    def recv(self, fd: int) -> int:
        """Receive up to ``slots`` datagrams without blocking; 0 when none are queued."""
        n = _recvmmsg(fd, self._hdrs_ptr, self.slots, MSG_DONTWAIT, None)
        if n >= 0:
            return n
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EINTR):
            return 0
        raise MmsgError(err, os.strerror(err))

    def length(self, i: int) -> int:
        """Length of datagram i of the last receive (hot loops read ``hdrs`` directly)."""
        return self.hdrs[i * MMSGHDR_WORDS + W_LEN] & 0xFFFFFFFF


class SendBatch:
    """Preallocated send side: up to ``slots`` datagrams of up to ``iovs`` iovecs each.

    Callers fill entry k by writing the word views directly: ``hdrs[k*8 + W_NAME]`` (address of a
    sockaddr), ``hdrs[k*8 + W_NAMELEN]``, ``hdrs[k*8 + W_IOVLEN]`` and the iovec words
    ``iov[(k*iovs + j)*2]`` / ``+1``. ``names`` offers one scratch sockaddr per entry for
    destinations that are not preallocated elsewhere (at ``k * name_stride``).
    """

    def __init__(self, family: int, slots: int, iovs: int = 2) -> None:
        self.slots = slots
        self.iovs = iovs
        self.name_len = SOCKADDR_LEN[family]
        self.name_stride = NAME_STRIDE[family]
        self._names = (ctypes.c_char * (slots * self.name_stride))()
        self._iov = (ctypes.c_uint64 * (slots * iovs * IOVEC_WORDS))()
        self._hdrs = (ctypes.c_uint64 * (slots * MMSGHDR_WORDS))()
        self.names = memoryview(self._names).cast("B")
        self.names_h = self.names.cast("H")
        self.names_q = self.names.cast("Q")
        self.names_addr = ctypes.addressof(self._names)
        self.iov = _words(self._iov)
        self.hdrs = _words(self._hdrs)
        iov_addr = ctypes.addressof(self._iov)
        family_bytes = family.to_bytes(2, "little")
        for k in range(slots):
            h = k * MMSGHDR_WORDS
            self.hdrs[h + W_NAME] = self.names_addr + k * self.name_stride
            self.hdrs[h + W_NAMELEN] = self.name_len
            self.hdrs[h + W_IOV] = iov_addr + k * iovs * 16
            self.hdrs[h + W_IOVLEN] = iovs
            self.names[k * self.name_stride : k * self.name_stride + 2] = family_bytes
        self._hdrs_addr = ctypes.addressof(self._hdrs)
        self._hdrs_ptr = ctypes.c_void_p(self._hdrs_addr)

    def send(self, fd: int, count: int) -> int:
        """Send entries 0..count-1; return how many could not be sent (each skipped once)."""
        failed = 0
        start = 0
        while start < count:
            ptr = self._hdrs_ptr if not start else ctypes.c_void_p(self._hdrs_addr + start * 64)
            n = _sendmmsg(fd, ptr, count - start, MSG_DONTWAIT)
            if n < 0:
                err = ctypes.get_errno()
                if err == errno.EINTR:
                    continue
                # EAGAIN (socket buffer full), ECONNREFUSED and friends: skip the failing entry.
                n = 0
                failed += 1
                start += 1
            start += n
        return failed


def sockaddr_bytes(family: int, host: str, port: int) -> bytes:
    """The raw ``struct sockaddr_in``/``sockaddr_in6`` bytes for an address literal."""
    fam = family.to_bytes(2, "little")
    p = port.to_bytes(2, "big")
    if family == socket.AF_INET:
        return fam + p + socket.inet_pton(socket.AF_INET, host) + bytes(8)
    return fam + p + bytes(4) + socket.inet_pton(socket.AF_INET6, host) + bytes(4)


def sockaddr_to_host_port(family: int, raw: bytes | memoryview) -> tuple[str, int]:
    """Decode raw sockaddr bytes (as produced by the kernel or ``sockaddr_bytes``)."""
    off, n = ADDR_SLICE[family]
    port_off, port_len = PORT_SLICE
    port = int.from_bytes(raw[port_off : port_off + port_len], "big")
    return socket.inet_ntop(family, bytes(raw[off : off + n])), port
