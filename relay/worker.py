"""A relay worker: one public socket in the SO_REUSEPORT group, one internal socket, one core.

Client -> transceiver: a packet from a confirmed flow is sent on, unread, with the flow's
precomputed encapsulation header as a first iovec and the received bytes as the second. A packet
from any other client is judged by relay.admission (the slow path), which accepts nothing but a
well-formed STUN Binding request whose USERNAME carries a valid routing hint for an allowlisted
transceiver.

Transceiver -> client: a packet from an allowlisted transceiver address is decapsulated by
pointing the iovec past the header; the client address in the header becomes the destination and
creates, refreshes or re-points the confirmed flow (only transceivers ever extend a flow).

Relay tiers (docs/relay.md): a hint for another cluster is admitted to a route (relay.routing),
which the hot path treats exactly like a transceiver. A cluster relay with --peer-listen also
reads a third socket, ``_from_peers``: encapsulated datagrams from edge relays, judged per packet
against relay.edgeflows; replies for their clients leave through the edge they came from. While
no peer flow exists, the two batch paths above run as before (one truthiness check per batch).

ICE over TCP (--listen-tcp): relay.tcpfront serves the worker's TCP connections in the same
loop (one more turn per round, only when configured); a transceiver's datagram flagged
``FLAG_TCP`` always takes the per-packet path, which hands it to relay.tcpfront.

This class is the I/O: sockets, batches, signals, the event loop. The two ``_from_*`` methods
are the hot path and are written for speed: locals instead of attributes, word views instead of
ctypes fields, no allocation but the dict key, no clock. What changes the flow and routing
tables off the hot path (configuration, journal and Redis, the once-a-second tick) is
relay.housekeeping; the headers it sends come from relay.headers.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import select
import signal
import socket
import time
from array import array
from collections.abc import Hashable
from itertools import repeat
from operator import attrgetter, sub

from common import encap
from common.encap import (
    FLAG_PROBE,
    FLAG_PROBE_REPLY,
    FLAG_TCP,
    FLAGS_OFFSET,
    HOP_LIMIT_OFFSET,
    MAGIC_OFFSET,
    PROBE_NONCE_LEN,
    VERSION_FAMILY_OFFSET,
)
from common.packet_class import CLASS_BY_FIRST_BYTE, PacketClass
from common.verdict import Drop
from relay import counters as C
from relay.addresspolicy import AddressPolicy
from relay.addrkey import AddressKeys
from relay.admission import NO_FLOW, Admission, hint_target
from relay.coalescing import Coalescing
from relay.config import RelayConfig
from relay.control import ControlBlock
from relay.edgeflows import EdgeFlow, EdgeFlowTable
from relay.flows import FlowTable, route_id
from relay.headers import WIRE, FlowHeaders, address_copy_plan, address_fields
from relay.housekeeping import Housekeeping
from relay.journal import FlowJournal
from relay.mmsg import (
    MMSGHDR_WORDS,
    W_LEN,
    W_NAME,
    W_NAMELEN,
    RecvBatch,
    SendBatch,
    sockaddr_to_host_port,
)
from relay.ratelimit import KeyedBuckets
from relay.routing import RouteTarget, Routing, Target
from relay.tcpfront import TcpFront

SLOT_SIZE = 2048  # larger than any datagram a WebRTC peer sends; a full slot means truncation
_DROP = {reason: C.DROPS + i for i, reason in enumerate(C.DROP_REASONS)}
# A flow's send descriptor (relay.headers.WIRE). Both lengths, the transceivers' sockaddr and
# the header, are the same for every flow of a worker and are preset in the send batch.
_WIRE = attrgetter("wire")
_TARGET_ID = attrgetter("target_id")
_TID = attrgetter("tid")
_STUN = int(PacketClass.STUN)
MAX_KNOWN_EDGES = 4096  # peer-ingress sources judged by --peer-network, remembered per worker
MAX_TRANSCEIVER_IDS = 0x10000  # the hint's transceiver id is 16 bits


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
        peer: socket.socket | None = None,
        peer_journal: FlowJournal | None = None,
        tcp_listener: socket.socket | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.public = public
        self.internal = internal
        self.ctr = counters
        self.family = config.family
        fam = self.family
        batch = config.batch_size
        self.keys = AddressKeys(fam)
        self.internal_keys = AddressKeys(config.internal_family)
        self.flows = FlowTable(config.limits)
        self.routing = Routing(config.internal_family, config.max_hint_age_s)
        self.admission = self._first_packet_admission(config)
        # Headers of confirmed flows live at their journal slot; one scratch header per batch
        # entry serves packets of pending flows.
        self.headers = FlowHeaders(self.keys, config.limits.max_confirmed_flows, batch)
        self.housekeeping = Housekeeping(
            config,
            self.keys,
            self.flows,
            self.routing,
            self.headers,
            journal,
            control,
            counters,
            denies=self.admission.denies,
            first_packets=self.admission.first_packets,
        )
        # The hot path's views of the tables above (the same objects, updated in place).
        self.peers = self.routing.peers
        self.refreshed = self.housekeeping.refreshed
        # Relay tiers: per route target id, its packet counters' base (relay.counters); empty
        # without routes, so the hot path counts as before.
        self.route_counters: dict[int, int] = {
            route_id(cluster): C.PACKETS_OF[C.PEER_ROUTES + cluster] for cluster in config.routes
        }
        # ICE over TCP (--listen-tcp): relay.tcpfront; None without a TCP listener.
        self.tcp = self._tcp_front(tcp_listener) if tcp_listener is not None else None
        self.rx_pub = RecvBatch(fam, batch, SLOT_SIZE)
        self.rx_int = RecvBatch(config.internal_family, batch, SLOT_SIZE)
        self.tx_int = SendBatch(config.internal_family, batch, iovs=2)
        self.tx_pub = SendBatch(fam, batch, iovs=1)
        self.header_len = self.headers.header_len
        self.header_verfam = encap.VERSION_FAMILY[self.keys.ip_version]
        self._no_flags_run = bytes(batch)
        self._prepare_batch_views(batch)
        self.public_fd = public.fileno()
        self.internal_fd = internal.fileno()
        self._prepare_peer_ingress(peer, peer_journal)
        self._client_sockaddr = bytearray(self.tx_pub.name_stride)
        self._client_sockaddr[0:2] = fam.to_bytes(2, "little")
        self.now = int(time.monotonic())
        self.wall = time.time()
        self._stop = False

    def _first_packet_admission(self, config: RelayConfig) -> Admission:
        """relay.admission over this worker's tables, with its first-packet budgets."""
        rate = config.first_packet_rate_per_s
        checks = config.transceiver_stun_rate_per_s
        return Admission(
            config.cluster,
            self.keys,
            AddressPolicy(config.deny_networks, config.allow_networks),
            KeyedBuckets(rate, 2 * rate, config.first_packet_prefixes, overflow=True),
            # Keyed by verified transceiver ids only: at most the allowlist's size.
            KeyedBuckets(checks, checks, MAX_TRANSCEIVER_IDS),
            self.flows,
            self.routing,
            SLOT_SIZE,
        )

    def _tcp_front(self, listener: socket.socket) -> TcpFront:
        """ICE over TCP, admitted by the same rule and budgets as UDP, with its own flow table
        (the per-hint budgets)."""
        config = self.config
        tcp_limits = config.tcp_limits
        tcp_admission = Admission(
            config.cluster,
            self.keys,
            self.admission.policy,
            self.admission.first_packets,
            self.admission.transceiver_checks,
            FlowTable(config.limits),
            self.routing,
            tcp_limits.max_frame_bytes + 1,
        )
        return TcpFront(
            tcp_limits, listener, self.internal, self.keys, tcp_admission, self.routing, self.ctr
        )

    def _prepare_peer_ingress(
        self, peer: socket.socket | None, peer_journal: FlowJournal | None
    ) -> None:
        """Relay tiers (--peer-listen): the edges' flow table, and the peer socket's batches
        when this relay has one."""
        config = self.config
        self.peer = peer
        self.peer_flows = EdgeFlowTable(config.limits, config.peer_path_ttl_s)
        self.housekeeping.peer_flows = self.peer_flows
        self.housekeeping.peer_journal = peer_journal
        self.live_peer_flows = self.peer_flows.flows  # the hot path's truthiness check
        self._known_edges: dict[Hashable, bool] = {}
        # Every source is refused at --peer-listen unless a --peer-network holds it.
        self._edge_policy = AddressPolicy(
            (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")),
            config.peer_networks,
        )
        if peer is not None:
            batch = config.batch_size
            self.peer_fd = peer.fileno()
            self.edge_keys = AddressKeys(config.peer_family)
            self.rx_peer = RecvBatch(config.peer_family, batch, SLOT_SIZE)
            self.tx_peer = SendBatch(config.peer_family, batch, iovs=1)
            self.tx_fwd = SendBatch(config.internal_family, batch, iovs=1)
        else:
            self.tx_peer = None  # type: ignore[assignment]
        self._peer_k = self._peer_bytes = 0

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
        # Where a header's client port and address go in a destination sockaddr: as byte slices
        # for the per-packet path, as 16-bit word pairs for the batch path.
        self._address_fields = address_fields(self.family)
        self._addr_copy_plan = address_copy_plan(self.family)

    # -- housekeeping (relay.housekeeping) -------------------------------------------------------
    def start(self) -> None:
        """Before serving: configuration, Redis and the journalled flows."""
        self.now = int(time.monotonic())
        self.wall = time.time()
        self.housekeeping.start(self.now)

    def tick(self, now: int) -> None:
        """Once a second: the clocks admission reads, then relay.housekeeping's tick."""
        self.now = now
        self.wall = time.time()
        self.housekeeping.tick(now)
        self.admission.transceiver_checks.prune(now)
        if self.tcp is not None:
            self.tcp.tick(now)

    # -- admission (relay.admission) -------------------------------------------------------------
    def _admit(self, key: Hashable, start: int, length: int, entry: int) -> bytes | None:
        """A packet from a client without a confirmed flow: its send descriptor, or None when
        relay.admission drops it (counted here)."""
        data = self.rx_pub.data[start : start + length]
        verdict = self.admission.accepts(data, key, self.now, self.wall)
        if isinstance(verdict, Drop):
            self.ctr[_DROP[verdict.reason]] += 1
            if verdict is NO_FLOW:  # a relay restart? Redis may know the flow
                self.housekeeping.look_up(key)
            return None
        self._admitted_tid = verdict.tid
        return self.headers.entry_wire(key, verdict, entry)

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
                sb.hdrs[W_NAME], sb.iov[0] = WIRE.unpack(flow.wire)
                sb.iov[3] = length
                if self.route_counters:
                    self._tids, self._lens = [flow.target_id], [length]
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
            if self.route_counters:
                self._tids, self._lens = list(map(_TARGET_ID, flows)), lens
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
            if self.route_counters:
                self._count_by_peer(0, k, failed)
            else:
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
        by_route = bool(self.route_counters)
        tids: list[int] = []
        sent_lens: list[int] = []
        for i in range(n):
            length = lens[i]
            flow = flows[i]
            if flow is not None and 0 < length < SLOT_SIZE:
                wire = flow.wire
                tid = flow.target_id
            else:
                wire = self._admit(keys[i], i * SLOT_SIZE, length, k)
                if wire is None:
                    continue
                tid = self._admitted_tid
            shdrs[k * MMSGHDR_WORDS + W_NAME], siov[k * 4] = WIRE.unpack(wire)
            siov[k * 4 + 2] = data_addr + i * SLOT_SIZE
            siov[k * 4 + 3] = length
            k += 1
            nbytes += length
            if by_route:
                tids.append(tid)
                sent_lens.append(length)
        self._tids, self._lens = tids, sent_lens
        return k, nbytes

    def _count_by_peer(self, direction: int, k: int, failed: int, header_len: int = 0) -> None:
        """Packet and byte counters by peer (relay.counters) for a relay with routes, from the
        target ids and lengths of the k entries just sent (``_tids``, ``_lens``). A batch for
        one target costs two C calls; only a mixed batch is counted packet by packet."""
        ctr = self.ctr
        tids, lens = self._tids, self._lens
        base_of = self.route_counters
        if min(tids) == max(tids):
            base = base_of.get(tids[0], C.PACKETS)
            ctr[base + direction] += k - failed
            ctr[base + 2 + direction] += sum(lens) - k * header_len
            return
        packets: dict[int, int] = {}
        octets: dict[int, int] = {}
        for tid, length in zip(tids, lens, strict=True):
            base = base_of.get(tid, C.PACKETS)
            packets[base] = packets.get(base, 0) + 1
            octets[base] = octets.get(base, 0) + length - header_len
        for base, count in packets.items():
            taken = min(failed, count)  # failures are not told apart by target
            failed -= taken
            ctr[base + direction] += count - taken
            ctr[base + 2 + direction] += octets[base]

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
            or data[MAGIC_OFFSET : n * SLOT_SIZE : SLOT_SIZE] != self._magic_run[:n]
            or data[VERSION_FAMILY_OFFSET : n * SLOT_SIZE : SLOT_SIZE] != self._verfam_run[:n]
            or data[FLAGS_OFFSET : n * SLOT_SIZE : SLOT_SIZE] != self._no_flags_run[:n]
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
            tids = list(map(_TID, targets))
            if (
                None in flows
                or list(map(_TARGET_ID, flows)) != tids
                # A client of a peer flow may be answered through its edge instead.
                or (self.live_peer_flows and not self.live_peer_flows.keys().isdisjoint(keys))
            ):
                # A new or re-pointed flow needs a decision that may refuse it (a denied
                # address): only the per-packet path can drop that one packet.
                k, nbytes = self._transceivers_one_by_one(n, targets, lens)
                compacted = True
            else:
                self.refreshed.update(keys)
                sb.iov[1 : n * 2 : 2] = array("Q", map(sub, lens, repeat(hl, n)))
                k, nbytes = n, sum(lens) - n * hl
                if self.route_counters:
                    self._tids, self._lens = tids, lens
        return self._sent_to_clients(n, k, nbytes, compacted)

    def _sent_to_clients(self, n: int, k: int, nbytes: int, compacted: bool) -> int:
        """Send the first k prepared entries of a batch of n received datagrams, and what was
        staged for edges; count them (``_sent_to_transceivers``' other direction)."""
        ctr = self.ctr
        if k:
            sb = self.tx_pub
            failed = sb.send(self.public_fd, k)
            if compacted:  # only after sending, as in _sent_to_transceivers
                sb.iov[0 : len(sb.iov) : 2] = self._transceiver_payload_bases
            if failed:
                ctr[_DROP["send_error"]] += failed
            if self.route_counters:
                self._count_by_peer(1, k, failed, self.header_len)
            else:
                ctr[C.PACKETS + 1] += k - failed
                ctr[C.BYTES + 1] += nbytes
        if self._peer_k:
            self._send_to_edges()
        ctr[C.BUCKET_OF[n]] += 1
        ctr[C.BATCH_SUM] += n
        ctr[C.BATCH_COUNT] += 1
        return n

    def _transceivers_one_by_one(self, n: int, targets: list, lens: list[int]) -> tuple[int, int]:
        """The per-packet path of ``_from_transceivers``: validates each header, compacts.

        Also where route probes are answered and where replies for clients of live peer flows
        are staged for their edges (``tx_peer``, sent by ``_send_to_edges``)."""
        rb = self.rx_int
        data = rb.data
        hl = self.header_len
        verfam = self.header_verfam
        (port_to, port_at, port_len), (addr_to, addr_at, addr_len) = self._address_fields
        sb = self.tx_pub
        snames, stride, siov = sb.names, sb.name_stride, sb.iov
        from_sockaddr = self.keys.from_sockaddr
        ctr = self.ctr
        peer_flows = self.live_peer_flows
        by_route = bool(self.route_counters)
        tids: list[int] = []
        sent_lens: list[int] = []
        k = nbytes = 0
        for i in range(n):
            target = targets[i]
            if target is None:
                ctr[_DROP["unknown_peer"]] += 1
                continue
            length = lens[i]
            base = i * SLOT_SIZE
            bad = header_problem(data, base, length, hl, verfam)
            if bad is not None:
                ctr[bad] += 1
                continue
            if data[base + FLAGS_OFFSET]:
                self._flagged_from_transceiver(target, base, length, k)
                continue
            d = k * stride
            at = base + port_at
            snames[d + port_to : d + port_to + port_len] = data[at : at + port_len]
            at = base + addr_at
            snames[d + addr_to : d + addr_to + addr_len] = data[at : at + addr_len]
            key = from_sockaddr(bytes(snames[d : d + stride]))
            if peer_flows:
                peer_flow = peer_flows.get(key)
                if peer_flow is not None and self.peer_flows.live(peer_flow, self.now):
                    self._stage_for_edge(key, peer_flow, target, base, length)
                    continue
            flow = self.flows.confirmed.get(key)
            if flow is None or flow.target_id != target.tid:
                if not self.housekeeping.confirm(key, target, self.now):
                    continue
            else:
                self.refreshed.add(key)
            siov[k * 2] = rb.data_addr + base + hl
            siov[k * 2 + 1] = length - hl
            k += 1
            nbytes += length - hl
            if by_route:
                tids.append(target.tid)
                sent_lens.append(length)
        self._tids, self._lens = tids, sent_lens
        return k, nbytes

    def _flagged_from_transceiver(self, target: Target, base: int, length: int, k: int) -> None:
        """A flagged datagram on the internal socket (not the UDP path): a transceiver's for a
        TCP client (relay.tcpfront), or a route's answer to a probe; anything else is dropped."""
        data = self.rx_int.data
        flags = data[base + FLAGS_OFFSET]
        hl = self.header_len
        if flags == FLAG_TCP and self.tcp is not None:
            (port_to, port_at, port_len), (addr_to, addr_at, addr_len) = self._address_fields
            snames, stride = self.tx_pub.names, self.tx_pub.name_stride
            d = k * stride  # a scratch destination: nothing is sent from it
            at = base + port_at
            snames[d + port_to : d + port_to + port_len] = data[at : at + port_len]
            at = base + addr_at
            snames[d + addr_to : d + addr_to + addr_len] = data[at : at + addr_len]
            key = self.keys.from_sockaddr(bytes(snames[d : d + stride]))
            self.tcp.to_client(key, target, data[base + hl : base + length])
        elif target.health is not None and length == hl + PROBE_NONCE_LEN:
            self._probe_answered(target, bytes(data[base + hl : base + length]))
        else:
            self.ctr[_DROP["encap_malformed"]] += 1

    # -- relay tiers: peer ingress, replies to edges, route probes ------------------------------
    def _stage_for_edge(
        self, key: Hashable, flow: EdgeFlow, target: Target, base: int, n: int
    ) -> None:
        """A reply for a client of a live peer flow: as received (header and all) to its edge."""
        if self.peer_flows.confirm(key, flow, target):
            self.housekeeping.peer_confirmed(key, flow, self.now)
        sb = self.tx_peer
        j = self._peer_k
        edge = flow.edge
        d = j * sb.name_stride
        sb.names[d : d + len(edge)] = edge
        sb.iov[j * 2] = self.rx_int.data_addr + base
        sb.iov[j * 2 + 1] = n
        self._peer_k = j + 1
        self._peer_bytes += n - self.header_len

    def _send_to_edges(self) -> None:
        k = self._peer_k
        failed = self.tx_peer.send(self.peer_fd, k)
        ctr = self.ctr
        if failed:
            ctr[_DROP["send_error"]] += failed
        edge = C.PACKETS_OF[C.PEER_EDGE]
        ctr[edge + 1] += k - failed
        ctr[edge + 3] += self._peer_bytes
        self._peer_k = self._peer_bytes = 0

    def _edge_allowed(self, key: Hashable) -> bool:
        """Is this peer-ingress source inside --peer-network? (remembered, bounded)"""
        known = self._known_edges
        allowed = known.get(key)
        if allowed is None:
            if len(known) >= MAX_KNOWN_EDGES:
                known.clear()
            allowed = known[key] = not self._edge_policy.denies(self.edge_keys.address(key))
        return allowed

    def _from_peers(self) -> int:
        """Encapsulated datagrams from edge relays (--peer-listen), per packet: see
        relay.edgeflows. Forwarded as received (hop limit decremented) from the internal
        socket, so the target's replies come back there."""
        rb = self.rx_peer
        n = rb.recv(self.peer_fd)
        if not n:
            return 0
        edge_keys = self.edge_keys.batch(rb.names_q, n)
        lens = rb.hdrs[W_LEN : n * MMSGHDR_WORDS : MMSGHDR_WORDS].tolist()
        data = rb.data
        hl = self.header_len
        verfam = self.header_verfam
        (port_to, port_at, port_len), (addr_to, addr_at, addr_len) = self._address_fields
        client = self._client_sockaddr
        from_sockaddr = self.keys.from_sockaddr
        table = self.peer_flows
        flows = table.flows
        now = self.now
        names, stride, name_len = rb.names, rb.name_stride, rb.name_len
        sb = self.tx_fwd
        shdrs, siov = sb.hdrs, sb.iov
        ctr = self.ctr
        k = nbytes = 0
        for i in range(n):
            if not self._edge_allowed(edge_keys[i]):
                ctr[_DROP["peer_denied"]] += 1
                continue
            length = lens[i]
            base = i * SLOT_SIZE
            bad = header_problem(data, base, length, hl, verfam)
            if bad is not None:
                ctr[bad] += 1
                continue
            if data[base + FLAGS_OFFSET]:
                self._flagged_from_edge(i, base, length)
                continue
            hops = data[base + HOP_LIMIT_OFFSET] - 1
            if hops <= 0:
                ctr[_DROP["hop_limit"]] += 1
                continue
            at = base + port_at
            client[port_to : port_to + port_len] = data[at : at + port_len]
            at = base + addr_at
            client[addr_to : addr_to + addr_len] = data[at : at + addr_len]
            key = from_sockaddr(bytes(client))
            edge = bytes(names[i * stride : i * stride + name_len])
            stun = CLASS_BY_FIRST_BYTE[data[base + hl]] == _STUN
            flow = flows.get(key)
            if flow is None:
                flow = self._new_edge_flow(key, edge, stun, base, length)
                if flow is None:
                    continue
            elif not flow.confirmed and not stun:
                ctr[_DROP["not_confirmed"]] += 1
                continue
            elif flow.edge == edge or flow.slot < 0:
                table.heard(key, flow, edge, now)
            else:  # a journalled flow heard through another edge: its record follows
                table.heard(key, flow, edge, now)
                self.housekeeping.journal_peer(key, flow)
            data[base + HOP_LIMIT_OFFSET] = hops
            shdrs[k * MMSGHDR_WORDS + W_NAME] = flow.target.ptr
            siov[k * 2] = rb.data_addr + base
            siov[k * 2 + 1] = length
            k += 1
            nbytes += length - hl
        return self._sent_from_edges(n, k, nbytes)

    def _new_edge_flow(
        self, key: Hashable, edge: bytes, stun: bool, base: int, length: int
    ) -> EdgeFlow | None:
        """The first packet of an edge's client here: a STUN check whose hint admits it opens
        its peer flow (relay.edgeflows); anything else is dropped (counted), and Redis asked."""
        ctr = self.ctr
        if not stun:  # a restart, or a new edge hashed here? Redis may know the client
            ctr[_DROP["no_flow"]] += 1
            self.housekeeping.look_up_peer(key, edge)
            return None
        data = self.rx_peer.data
        decided = hint_target(
            data[base + self.header_len : base + length],
            self.routing,
            self.config.cluster,
            self.wall,
        )
        if isinstance(decided, Drop):
            ctr[_DROP[decided.reason]] += 1
            return None
        return self.peer_flows.admit(key, decided[1], decided[0], edge, self.now)

    def _sent_from_edges(self, n: int, k: int, nbytes: int) -> int:
        """Send the first k prepared entries of a batch of n datagrams from edges on to their
        targets; count them."""
        ctr = self.ctr
        if k:
            failed = self.tx_fwd.send(self.internal_fd, k)
            if failed:
                ctr[_DROP["send_error"]] += failed
            edge_base = C.PACKETS_OF[C.PEER_EDGE]
            ctr[edge_base] += k - failed
            ctr[edge_base + 2] += nbytes
        ctr[C.BUCKET_OF[n]] += 1
        ctr[C.BATCH_SUM] += n
        ctr[C.BATCH_COUNT] += 1
        return n

    def _flagged_from_edge(self, i: int, base: int, length: int) -> None:
        """A flagged datagram at the peer ingress: a route probe from an edge gets the same bytes
        back, flagged as the answer; any other is dropped."""
        flags = self.rx_peer.data[base + FLAGS_OFFSET]
        if flags != FLAG_PROBE or length != self.header_len + PROBE_NONCE_LEN:
            self.ctr[_DROP["encap_malformed"]] += 1
            return
        reply = bytearray(self.rx_peer.data[base : base + length])
        reply[FLAGS_OFFSET] = FLAG_PROBE_REPLY
        rb = self.rx_peer
        raw = bytes(rb.names[i * rb.name_stride : i * rb.name_stride + rb.name_len])
        try:
            self.peer.sendto(reply, sockaddr_to_host_port(self.config.peer_family, raw))  # type: ignore[union-attr]
        except OSError:
            self.ctr[_DROP["send_error"]] += 1

    def _probe_routes(self) -> None:
        """Every --route-probe-interval: probe each route address (relay.routehealth)."""
        fam = self.keys.ip_version
        for route in self.routing.routes.values():
            health = route.health
            assert health is not None
            for index, nonce in health.probe_round():
                with contextlib.suppress(OSError):  # an unsent probe counts as unanswered
                    self.internal.sendto(encap.probe(fam, nonce), route.addresses[index])
            if route.follow_health():
                self.ctr[C.ROUTE_FAILOVERS] += 1

    def _probe_answered(self, route: RouteTarget, nonce: bytes) -> None:
        assert route.health is not None
        if route.health.answered(nonce) and route.follow_health():
            self.ctr[C.ROUTE_FAILOVERS] += 1

    def _from_tcp(self) -> int:
        """ICE over TCP (relay.tcpfront): what its connections have ready, never waiting."""
        return self.tcp.serve(self.now, self.wall)  # type: ignore[union-attr]

    # -- event loop ------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop = True

    def run(self) -> None:
        """Serve until SIGTERM. Called in the forked child; never returns to supervisor code."""
        wake_r = self._install_signals()
        self.start()
        housekeeping = self.housekeeping
        cache = housekeeping.cache
        poller = self._poller(wake_r)
        next_tick = time.monotonic() + 1.0
        probing = bool(self.config.routes)
        probe_every = self.config.route_probe_interval_s
        next_probe = time.monotonic()
        sleep_ms = int(1000 * min(1.0, probe_every)) if probing else 1000
        from_peers = self._from_peers if self.peer is not None else _nothing
        from_tcp = self._from_tcp if self.tcp is not None else _nothing
        coalescing = Coalescing(self.config.coalesce_us, self.config.batch_size)
        wait_s = coalescing.wait_s
        sleep = time.sleep
        mono = time.monotonic()
        housekeeping.serve()
        while not self._stop:
            # Drain the sockets in turns, so one direction cannot starve another; sleep only
            # when a round found nothing, or briefly (--coalesce-us, relay.coalescing) when it
            # found a few while datagrams come densely, so that the next round takes several.
            if cache is not None and cache.results:
                housekeeping.restore_from_cache(self.now)
            found = self._from_clients() + self._from_transceivers() + from_peers() + from_tcp()
            if not found:
                idle_from = mono
                for fd, _ in poller.poll(sleep_ms):
                    if fd == wake_r:
                        _drain(wake_r)
                mono = time.monotonic()
                coalescing.idled(mono - idle_from)
            else:
                if coalescing.wait_after(found):
                    sleep(wait_s)
                mono = time.monotonic()
            if probing and mono >= next_probe:
                self._probe_routes()
                next_probe = mono + probe_every
            if mono >= next_tick:
                self.tick(int(mono))
                next_tick = mono + 1.0

    def _install_signals(self) -> int:
        """SIGTERM stops the loop, through a wakeup pipe (its read end is returned) so a
        sleeping poll wakes too; the supervisor's other signals are not the worker's."""
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        return wake_r

    def _poller(self, wake_r: int) -> select.poll:
        """What the loop sleeps on when a round found nothing: every socket it reads, and the
        wakeup pipe.

        poll(2), not epoll: poll puts the worker on the sockets' wait queues only while it
        sleeps. A socket registered with epoll keeps a waiter for good, and then every datagram
        the worker sends makes the kernel take the wait-queue lock when it frees the buffer
        (sock_wfree -> sock_def_write_space): measured at ~5% of a busy worker."""
        poller = select.poll()
        fds = [self.public_fd, self.internal_fd, wake_r]
        if self.peer is not None:
            fds.append(self.peer_fd)
        if self.tcp is not None:
            fds.append(self.tcp.fileno())
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return poller


def header_problem(
    data: memoryview, base: int, length: int, header_len: int, verfam: int
) -> int | None:
    """The drop counter of a received encapsulated datagram whose length or header is wrong for
    this relay (the per-packet paths), or None."""
    if length <= header_len or length >= SLOT_SIZE or data[base + MAGIC_OFFSET] != encap.MAGIC:
        return _DROP["encap_malformed"]
    got = data[base + VERSION_FAMILY_OFFSET]
    if got != verfam:
        return _DROP["wrong_family" if got >> 4 == encap.VERSION else "encap_malformed"]
    return None


def _nothing() -> int:
    return 0


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
