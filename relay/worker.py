"""A relay worker: one public socket in the SO_REUSEPORT group, one internal socket, one core.

Client -> transceiver: a packet from a confirmed flow is sent on, unread, with the flow's
precomputed encapsulation header as a first iovec and the received bytes as the second. Only a
packet from an unknown client goes to ``_admit`` (the slow path), which accepts nothing but a
well-formed STUN Binding request whose USERNAME carries a valid routing hint for an allowlisted
transceiver.

Transceiver -> client: a packet from an allowlisted transceiver address is decapsulated by
pointing the iovec past the header; the client address in the header becomes the destination and
creates, refreshes or re-points the confirmed flow (only transceivers ever extend a flow).

The two ``_from_*`` methods are the hot path and are written for speed: locals instead of
attributes, word views instead of ctypes fields, no allocation but the dict key, no clock.
Everything else runs on the coarse tick (once a second) and is written for reading.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import struct
import time
from array import array
from collections.abc import Hashable
from itertools import repeat
from operator import attrgetter, sub

from common import encap
from common.hint import HintError, HintVerifier
from common.stun import StunError, binding_request_username, server_ufrag
from relay import counters as C
from relay.addresspolicy import AddressPolicy
from relay.config import RelayConfig
from relay.control import ControlBlock, RoutingConfig
from relay.flowcache import RedisFlowCache
from relay.flows import EVICTIONS, ConfirmedFlow, FlowLimitError, FlowTable
from relay.journal import FlowJournal
from relay.mmsg import (
    ADDR_SLICE,
    MMSGHDR_WORDS,
    W_LEN,
    W_NAME,
    W_NAMELEN,
    RecvBatch,
    SendBatch,
    sockaddr_bytes,
)
from relay.peerkey import PeerKeys
from relay.ratelimit import KeyedBuckets

HEADER_STRIDE = 24  # bytes reserved per encapsulation header (IPv6 needs 22)
SLOT_SIZE = 2048  # larger than any datagram a WebRTC peer sends; a full slot means truncation
CONFIRMED_SWEEPS_PER_TTL = 4
_DROP = {reason: C.DROPS + i for i, reason in enumerate(C.DROP_REASONS)}
_WIRE = attrgetter("wire")
# A flow's send descriptor: its transceiver's sockaddr pointer and its header's pointer. Both
# lengths are the same for every flow of a worker and are preset in the send batch.
_WIRE_WORDS = struct.Struct("=QQ")
_TARGET_ID = attrgetter("target_id")
_TID = attrgetter("tid")


class Target:
    """An allowlisted transceiver; its sockaddr buffer is updated in place if its address moves,
    so flows that point at it never need rewriting."""

    def __init__(self, tid: int, family: int, host: str, port: int) -> None:
        self.tid = tid
        self.family = family
        self._buf = ctypes.create_string_buffer(28)
        self.ptr = ctypes.addressof(self._buf)
        self.set_address(host, port)

    def set_address(self, host: str, port: int) -> None:
        raw = sockaddr_bytes(self.family, host, port)
        ctypes.memmove(self.ptr, raw, len(raw))
        self.address = (host, port)
        self.peer_key = PeerKeys(self.family).from_sockaddr(raw)


class Worker:
    def __init__(
        self,
        index: int,
        config: RelayConfig,
        public: socket.socket,
        internal: socket.socket,
        counters: memoryview,
        journal: FlowJournal,
        control: ControlBlock,
    ) -> None:
        self.index = index
        self.config = config
        self.public = public
        self.internal = internal
        self.ctr = counters
        self.journal = journal
        self.control = control
        self.flows = FlowTable(config.limits)
        self.policy = AddressPolicy(config.deny_networks, config.allow_networks)
        # Before the HMAC of a hint (~9 us): per source prefix, a bounded table; a spoofed flood
        # from more prefixes than it holds shares one overflow budget (relay.ratelimit).
        rate = config.first_packet_rate_per_s
        self.first_packets = KeyedBuckets(
            rate, 2 * rate, config.first_packet_prefixes, overflow=True
        )
        self.family = config.family
        fam = self.family
        batch = config.batch_size
        self.rx_pub = RecvBatch(fam, batch, SLOT_SIZE)
        self.rx_int = RecvBatch(config.internal_family, batch, SLOT_SIZE)
        self.tx_int = SendBatch(config.internal_family, batch, iovs=2)
        self.tx_pub = SendBatch(fam, batch, iovs=1)
        self.keys = PeerKeys(fam)
        self.internal_keys = PeerKeys(config.internal_family)
        self.header_len = encap.HEADER_LEN_V4 if fam == socket.AF_INET else encap.HEADER_LEN_V6
        self.header_verfam = (encap.VERSION << 4) | (4 if fam == socket.AF_INET else 6)
        # Headers of confirmed flows live at journal slot * HEADER_STRIDE; one scratch header per
        # batch entry serves packets of pending flows.
        cap = config.limits.max_confirmed_flows
        self._headers = (ctypes.c_char * (cap * HEADER_STRIDE))()
        self._headers_addr = ctypes.addressof(self._headers)
        self._scratch = (ctypes.c_char * (batch * HEADER_STRIDE))()
        self._scratch_addr = ctypes.addressof(self._scratch)
        self._prepare_batch_views(batch)
        self.public_fd = public.fileno()
        self.internal_fd = internal.fileno()
        self.refreshed: set[Hashable] = set()  # clients a transceiver sent to since the last tick
        self.targets: dict[int, Target] = {}
        self.peers: dict[Hashable, Target] = {}
        self.verifier: HintVerifier | None = None
        self.cache: RedisFlowCache | None = None  # started in run(), after the fork
        self.generation = -1
        self.now = int(time.monotonic())
        self.wall = time.time()
        self._next_confirmed_sweep = 0
        self._stop = False
        self.serving = False

    def _prepare_batch_views(self, batch: int) -> None:
        """Precompute what the batch-at-once paths slice with, once."""
        self._magic_run = bytes([encap.MAGIC]) * batch
        self._verfam_run = bytes([self.header_verfam]) * batch
        # tx_int entry k carries rx_pub slot k; tx_pub entry k carries rx_int slot k (past its
        # header).
        self._client_payload_bases = array(
            "Q", (self.rx_pub.data_addr + k * SLOT_SIZE for k in range(batch))
        )
        self.tx_int.iov[2 : len(self.tx_int.iov) : 4] = self._client_payload_bases
        # Lengths shared by every flow: the transceivers' sockaddr and the encapsulation header.
        self.tx_int.hdrs[W_NAMELEN : len(self.tx_int.hdrs) : MMSGHDR_WORDS] = array(
            "Q", [self.tx_int.name_len] * batch
        )
        self.tx_int.iov[1 : len(self.tx_int.iov) : 4] = array("Q", [self.header_len] * batch)
        self._transceiver_payload_bases = array(
            "Q", (self.rx_int.data_addr + k * SLOT_SIZE + self.header_len for k in range(batch))
        )
        self.tx_pub.iov[0 : len(self.tx_pub.iov) : 2] = self._transceiver_payload_bases
        # (destination, source) offsets in 16-bit units: header port/address -> sockaddr fields.
        ip_off, ip_len = ADDR_SLICE[self.family]
        self._addr_copy_plan = [(1, 2)] + [(ip_off // 2 + j, 3 + j) for j in range(ip_len // 2)]

    # -- configuration and housekeeping (coarse tick) ------------------------------------------
    def apply_routing(self, routing: RoutingConfig) -> None:
        self.verifier = HintVerifier(routing.keyring, self.config.max_hint_age_s)
        ifam = self.config.internal_family
        for tid, (host, port) in routing.transceivers.items():
            target = self.targets.get(tid)
            if target is None:
                self.targets[tid] = Target(tid, ifam, host, port)
            elif target.address != (host, port):
                target.set_address(host, port)
        for tid in [t for t in self.targets if t not in routing.transceivers]:
            del self.targets[tid]
            self._free(self.flows.remove_target(tid))
        self.peers = {t.peer_key: t for t in self.targets.values()}

    def poll_control(self) -> None:
        if self.control.generation() == self.generation:
            return
        self.generation, raw = self.control.read()
        self.apply_routing(RoutingConfig.from_json(raw))
        if self.serving:  # /readyz: this worker forwards with the current configuration
            self.ctr[C.CONFIG_GENERATION] = self.generation

    def restore_journal(self) -> int:
        restored = 0
        for slot, raw, tid in self.journal.attach():
            key = self.keys.from_bytes(raw)
            target = self.targets.get(tid)
            flow = None
            if target is not None and not self._denied(key):
                flow, evicted = self.flows.restore(key, tid, self.now)
                self._free(evicted)
            if flow is None:
                self.journal.clear(slot)
                continue
            flow.slot = slot
            flow.wire = self._flow_wire(key, target, slot)
            restored += 1
        self.ctr[C.FLOWS_RESTORED] += restored
        return restored

    def tick(self, now: int) -> None:
        self.now = now
        self.wall = time.time()
        self.poll_control()
        flows = self.flows
        confirmed = flows.confirmed
        cache = self.cache
        flows.refresh(self.refreshed, now)
        if cache is not None:
            rewrite_after = self.config.limits.idle_ttl_s // 2
            for key in self.refreshed:
                flow = confirmed.get(key)
                if flow is not None and now - flow.stored_at >= rewrite_after:
                    flow.stored_at = now
                    cache.store(key, self.keys.host_port(key), flow.target_id)
        self.refreshed.clear()
        if cache is not None:
            stats = cache.stats
            for i, value in enumerate(
                (stats.writes, stats.hits, stats.misses, stats.errors, stats.dropped)
            ):
                self.ctr[C.REDIS_OPS + i] = value
        flows.expire_pending(now)
        self.first_packets.prune(now)
        if now >= self._next_confirmed_sweep:
            self._free(flows.expire_confirmed(now))
            self._next_confirmed_sweep = now + max(
                1, self.config.limits.idle_ttl_s // CONFIRMED_SWEEPS_PER_TTL
            )
        ctr = self.ctr
        ctr[C.FLOWS_CREATED_PENDING] = flows.created_pending
        ctr[C.FLOWS_CREATED_CONFIRMED] = flows.created_confirmed
        ctr[C.FLOWS_EXPIRED_PENDING] = flows.expired_pending
        ctr[C.FLOWS_EXPIRED_CONFIRMED] = flows.expired_confirmed
        ctr[C.FLOWS_ACTIVE_PENDING] = len(flows.pending)
        ctr[C.FLOWS_ACTIVE_CONFIRMED] = len(flows.confirmed)
        for i, scope in enumerate(EVICTIONS):
            ctr[C.FLOWS_EVICTED + i] = flows.evicted[scope]

    # -- flow set-up (slow path) -----------------------------------------------------------------
    def _denied(self, key: Hashable) -> bool:
        """Is this client's address one the relay never admits nor sends to (--deny-network)?"""
        return self.policy.denies(self.keys.port_and_address(key)[1])

    def _write_header(self, addr: int, key: Hashable) -> None:
        """Encapsulation header for the client ``key`` (a client -> transceiver packet's)."""
        port, address = self.keys.port_and_address(key)
        raw = bytes((encap.MAGIC, self.header_verfam, encap.DEFAULT_HOP_LIMIT, 0)) + port + address
        ctypes.memmove(addr, raw, len(raw))

    def _flow_wire(self, key: Hashable, target: Target, slot: int) -> bytes:
        """The four send-descriptor words of a flow, packed once so batches can join them."""
        addr = self._headers_addr + slot * HEADER_STRIDE
        self._write_header(addr, key)
        return _WIRE_WORDS.pack(target.ptr, addr)

    def _admit(self, key: Hashable, start: int, length: int, entry: int) -> bytes | None:
        """Decide on a packet from a client without a confirmed flow; None means dropped."""
        ctr = self.ctr
        if not 0 < length < SLOT_SIZE:
            ctr[_DROP["empty_or_oversize"]] += 1
            return None
        data = self.rx_pub.data
        if data[start] > 3:  # RFC 7983: only STUN may start a flow
            if key in self.flows.pending:
                ctr[_DROP["not_confirmed"]] += 1
                return None
            ctr[_DROP["no_flow"]] += 1
            if self.cache is not None:  # a relay restart? Redis may know the flow
                self.cache.lookup(key, self.keys.host_port(key), time.monotonic())
            return None
        if self._denied(key):  # before any table is touched: it never gets a flow
            ctr[_DROP["denied_address"]] += 1
            return None
        prefix = self.keys.prefix(key)
        if not self.first_packets.allow(prefix, self.now):
            known = prefix in self.first_packets
            ctr[_DROP["first_packet_rate" if known else "first_packet_overflow"]] += 1
            return None
        try:
            username = binding_request_username(data[start : start + length])
        except StunError:
            ctr[_DROP["stun_malformed"]] += 1
            return None
        try:
            ufrag = server_ufrag(username)
        except StunError:
            ctr[_DROP["bad_username"]] += 1
            return None
        try:
            assert self.verifier is not None
            hint = self.verifier.verify(ufrag, self.wall)
        except HintError as exc:
            ctr[_DROP["hint_" + exc.reason]] += 1
            return None
        if hint.cluster != self.config.cluster:
            ctr[_DROP["wrong_cluster"]] += 1
            return None
        target = self.targets.get(hint.transceiver_id)
        if target is None:
            ctr[_DROP["unknown_transceiver"]] += 1
            return None
        try:
            self.flows.admit(key, prefix, ufrag, target.tid, self.now)
        except FlowLimitError as exc:
            ctr[_DROP[exc.reason]] += 1
            return None
        addr = self._scratch_addr + entry * HEADER_STRIDE
        self._write_header(addr, key)
        return _WIRE_WORDS.pack(target.ptr, addr)

    def _confirm(self, key: Hashable, target: Target) -> bool:
        """A transceiver sent to ``key``: create or re-point its confirmed flow and journal it.

        False means refused: the caller must drop the packet, not send it.
        """
        if key not in self.flows.confirmed and self._denied(key):
            self.ctr[_DROP["denied_address"]] += 1
            return False
        flow, changed, evicted = self.flows.confirm(key, target.tid, self.now)
        self._free(evicted)  # first: the newcomer may take an evicted flow's journal slot
        if changed:
            self._journal_and_wire(key, flow, target)
            if self.cache is not None:
                flow.stored_at = self.now
                self.cache.store(key, self.keys.host_port(key), target.tid)
        return True

    def _free(self, flows: list[ConfirmedFlow]) -> None:
        """Release the journal slots (and so the header slots) of flows that left the table."""
        for flow in flows:
            self.journal.clear(flow.slot)

    def _journal_and_wire(self, key: Hashable, flow: ConfirmedFlow, target: Target) -> None:
        flow.slot = self.journal.write(self.keys.to_bytes(key), target.tid, flow.slot)
        if flow.slot < 0:
            # The table never holds more flows than the journal has slots, and every flow that
            # leaves frees its slot. A restarted worker rebuilds both from the journal.
            raise RuntimeError("flow journal full: out of step with the flow table")
        flow.wire = self._flow_wire(key, target, flow.slot)

    def restore_from_cache(self) -> None:
        """Flows Redis knew: recreate them (a relay replaced while its calls went on)."""
        assert self.cache is not None
        for key, tid in self.cache.take_results(time.monotonic()):
            target = self.targets.get(tid)
            if target is None or key in self.flows.confirmed or self._denied(key):
                continue
            flow, evicted = self.flows.restore(key, tid, self.now)
            self._free(evicted)
            if flow is None:
                continue
            self._journal_and_wire(key, flow, target)
            self.ctr[C.FLOWS_RESTORED_REDIS] += 1

    # -- hot path --------------------------------------------------------------------------------
    # Both directions first try a batch-at-once path in which every per-packet step (flow key,
    # flow lookup, descriptor fill) runs inside C builtins (tolist, map, bytes.join, strided
    # memoryview copies): no Python bytecode per packet. Any packet that needs a decision (unknown
    # client, new flow, odd length, malformed header) sends the whole batch through the
    # per-packet loop instead.

    def _from_clients(self) -> int:
        rb = self.rx_pub
        n = rb.recv(self.public_fd)
        if not n:
            return 0
        keys = self.keys.batch(rb.names_q, n)
        sb = self.tx_int
        if n == 1:  # an idle worker woken by one datagram: fewest steps, for latency
            flow = self.flows.confirmed.get(keys[0])
            length = rb.hdrs[W_LEN]
            if flow is not None and 0 < length < SLOT_SIZE:
                sb.hdrs[W_NAME], sb.iov[0] = _WIRE_WORDS.unpack(flow.wire)
                sb.iov[3] = length
                return self._sent_to_transceivers(n, 1, length)
            return self._sent_to_transceivers(
                n, *self._clients_one_by_one(n, keys, [flow], [length]), compacted=True
            )
        flows = list(map(self.flows.confirmed.get, keys))
        lens_view = rb.hdrs[W_LEN : n * MMSGHDR_WORDS : MMSGHDR_WORDS]
        lens = lens_view.tolist()
        if None in flows or 0 in lens or max(lens) >= SLOT_SIZE:
            k, nbytes = self._clients_one_by_one(n, keys, flows, lens)
            return self._sent_to_transceivers(n, k, nbytes, compacted=True)
        else:
            wires = memoryview(b"".join(map(_WIRE, flows))).cast("Q")
            sb.hdrs[W_NAME : n * MMSGHDR_WORDS : MMSGHDR_WORDS] = wires[0::2]
            siov = sb.iov
            siov[0 : n * 4 : 4] = wires[1::2]
            siov[3 : n * 4 : 4] = lens_view
            k, nbytes = n, sum(lens)
        return self._sent_to_transceivers(n, k, nbytes)

    def _sent_to_transceivers(self, n: int, k: int, nbytes: int, compacted: bool = False) -> int:
        """Send the first k prepared entries of a batch of n received datagrams; count them."""
        ctr = self.ctr
        if k:
            failed = self.tx_int.send(self.internal_fd, k)
            if compacted:
                # Only after sending: restore the identity slot mapping the batch path relies on.
                siov = self.tx_int.iov
                siov[2 : len(siov) : 4] = self._client_payload_bases
            if failed:
                ctr[_DROP["send_error"]] += failed
            ctr[C.PACKETS] += k - failed
            ctr[C.BYTES] += nbytes
        ctr[C.BUCKET_OF[n]] += 1
        ctr[C.BATCH_SUM] += n
        ctr[C.BATCH_COUNT] += 1
        return n

    def _clients_one_by_one(
        self, n: int, keys: list[Hashable], flows: list, lens: list[int]
    ) -> tuple[int, int]:
        """The per-packet path of ``_from_clients``: admits or drops, then compacts the batch."""
        sb = self.tx_int
        shdrs, siov = sb.hdrs, sb.iov
        data_addr = self.rx_pub.data_addr
        k = nbytes = 0
        for i in range(n):
            length = lens[i]
            flow = flows[i]
            if flow is not None and 0 < length < SLOT_SIZE:
                wire = flow.wire
            else:
                wire = self._admit(keys[i], i * SLOT_SIZE, length, k)
                if wire is None:
                    continue
            shdrs[k * MMSGHDR_WORDS + W_NAME], siov[k * 4] = _WIRE_WORDS.unpack(wire)
            siov[k * 4 + 2] = data_addr + i * SLOT_SIZE
            siov[k * 4 + 3] = length
            k += 1
            nbytes += length
        return k, nbytes

    def _from_transceivers(self) -> int:
        rb = self.rx_int
        n = rb.recv(self.internal_fd)
        if not n:
            return 0
        targets = list(map(self.peers.get, self.internal_keys.batch(rb.names_q, n)))
        lens_view = rb.hdrs[W_LEN : n * MMSGHDR_WORDS : MMSGHDR_WORDS]
        lens = lens_view.tolist()
        data = rb.data
        hl = self.header_len
        sb = self.tx_pub
        if (
            None in targets
            or min(lens) <= hl
            or max(lens) >= SLOT_SIZE
            or data[0 : n * SLOT_SIZE : SLOT_SIZE] != self._magic_run[:n]
            or data[1 : n * SLOT_SIZE : SLOT_SIZE] != self._verfam_run[:n]
        ):
            k, nbytes = self._transceivers_one_by_one(n, targets, lens)
            compacted = True
        else:
            compacted = False
            # Client address from each header into each destination sockaddr, as strided copies.
            src, dst, dstride = rb.data_h, sb.names_h, sb.name_stride // 2
            for d, s in self._addr_copy_plan:
                dst[d : n * dstride : dstride] = src[s : n * SLOT_SIZE // 2 : SLOT_SIZE // 2]
            keys = self.keys.batch(sb.names_q, n)
            flows = list(map(self.flows.confirmed.get, keys))
            if None in flows or list(map(_TARGET_ID, flows)) != list(map(_TID, targets)):
                # A new or re-pointed flow needs a decision that may refuse it (a denied
                # address): only the per-packet path can drop that one packet.
                k, nbytes = self._transceivers_one_by_one(n, targets, lens)
                compacted = True
            else:
                self.refreshed.update(keys)
                sb.iov[1 : n * 2 : 2] = array("Q", map(sub, lens, repeat(hl, n)))
                k, nbytes = n, sum(lens) - n * hl
        ctr = self.ctr
        if k:
            failed = sb.send(self.public_fd, k)
            if compacted:  # only after sending, as in _sent_to_transceivers
                sb.iov[0 : len(sb.iov) : 2] = self._transceiver_payload_bases
            if failed:
                ctr[_DROP["send_error"]] += failed
            ctr[C.PACKETS + 1] += k - failed
            ctr[C.BYTES + 1] += nbytes
        ctr[C.BUCKET_OF[n]] += 1
        ctr[C.BATCH_SUM] += n
        ctr[C.BATCH_COUNT] += 1
        return n

    def _transceivers_one_by_one(self, n: int, targets: list, lens: list[int]) -> tuple[int, int]:
        """The per-packet path of ``_from_transceivers``: validates each header, compacts."""
        rb = self.rx_int
        data = rb.data
        hl = self.header_len
        verfam = self.header_verfam
        ip_off, ip_len = ADDR_SLICE[self.family]
        sb = self.tx_pub
        snames, stride, siov = sb.names, sb.name_stride, sb.iov
        from_sockaddr = self.keys.from_sockaddr
        ctr = self.ctr
        k = nbytes = 0
        for i in range(n):
            target = targets[i]
            if target is None:
                ctr[_DROP["unknown_peer"]] += 1
                continue
            length = lens[i]
            base = i * SLOT_SIZE
            if length <= hl or length >= SLOT_SIZE or data[base] != encap.MAGIC:
                ctr[_DROP["encap_malformed"]] += 1
                continue
            if data[base + 1] != verfam:
                ctr[_DROP["wrong_family" if data[base + 1] >> 4 == 1 else "encap_malformed"]] += 1
                continue
            d = k * stride
            snames[d + 2 : d + 4] = data[base + 4 : base + 6]
            snames[d + ip_off : d + ip_off + ip_len] = data[base + 6 : base + hl]
            key = from_sockaddr(bytes(snames[d : d + 24]))
            flow = self.flows.confirmed.get(key)
            if flow is None or flow.target_id != target.tid:
                if not self._confirm(key, target):
                    continue
            else:
                self.refreshed.add(key)
            siov[k * 2] = rb.data_addr + base + hl
            siov[k * 2 + 1] = length - hl
            k += 1
            nbytes += length - hl
        return k, nbytes

    # -- event loop ------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop = True

    def run(self) -> None:
        """Serve until SIGTERM. Called in the forked child; never returns to supervisor code."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if self.config.redis_url:
            self.cache = RedisFlowCache(
                self.config.redis_url,
                self.config.cluster,
                ttl_s=2 * self.config.limits.idle_ttl_s,
                timeout_s=self.config.redis_timeout_ms / 1000,
                lookups_per_s=self.config.redis_lookups_per_s,
                auth=self.config.redis_auth,
            ).start()
        self.tick(int(time.monotonic()))
        self.restore_journal()
        # poll(2), not epoll: poll puts the worker on the sockets' wait queues only while it
        # sleeps. A socket registered with epoll keeps a waiter for good, and then every datagram
        # the worker sends makes the kernel take the wait-queue lock when it frees the buffer
        # (sock_wfree -> sock_def_write_space): measured at ~5% of a busy worker.
        poller = select.poll()
        for fd in (self.public_fd, self.internal_fd, wake_r):
            poller.register(fd, select.POLLIN)
        next_tick = time.monotonic() + 1.0
        self.serving = True
        self.ctr[C.CONFIG_GENERATION] = self.generation
        while not self._stop:
            # Drain both sockets in turns, so one direction cannot starve the other; sleep only
            # when a round found nothing.
            if self.cache is not None and self.cache.results:
                self.restore_from_cache()
            if not self._from_clients() + self._from_transceivers():
                for fd, _ in poller.poll(1000):
                    if fd == wake_r:
                        _drain(wake_r)
            mono = time.monotonic()
            if mono >= next_tick:
                self.tick(int(mono))
                next_tick = mono + 1.0


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
