"""The transceiver's traffic on the loopback device, with the kernel's timestamps: where the
realtime benchmark's markers cross each socket boundary (``bench/realtime_latency.py``).

An ``AF_PACKET`` socket on ``lo`` (root, or CAP_NET_RAW) sees every datagram and segment as it
is sent (``PACKET_OUTGOING``: the kernel's timestamp is the sender's ``sendto``/``write``, which
on loopback also puts it in the receiver's socket). Four hops of RTP, by (SSRC, sequence
number), read in clear (SRTP leaves the RTP header unencrypted): caller -> relay, relay ->
transceiver (encapsulated, ``common.encap``), transceiver -> relay, relay -> caller; and the
WebSocket between the transceiver and the backend server, reassembled per direction (HTTP
upgrade skipped, frames unmasked and, with permessage-deflate, inflated): each message that
starts a sound after silence (its audio's peak crosses ``AUDIBLE_PEAK``), and the session each
connection carries. The backend's protocol says which messages are audio and which name the
session (``WIRES``): the Realtime API's (an ``input_audio_buffer.append`` up, a
``response.output_audio.delta`` down, ``session.created``'s ``event_<session>_<n>`` id), our
native one's (binary PCM16 frames, ``session.start``'s ``session_id``), Media Streams' (``media``
with base64 mu-law both ways, ``start``'s ``callSid`` less its ``CA``). gRPC is not a WebSocket:
its connection is cleartext HTTP/2 on loopback, read by ``Http2Direction`` (``FRAMINGS``): the
client preface, then frames, the DATA of each HTTP/2 stream concatenated into gRPC's
length-prefixed messages, read as ``rtcedge.backend.v1``'s protobuf (``ToBackend`` up,
``FromBackend`` down: ``Pcm16`` both ways, ``SessionStart``'s ``session_id``).

``Capture`` is sans-I/O (``feed(timestamp, frame)``); ``CaptureThread`` reads the socket
until stopped (bounded: a 0.2 s receive timeout). Nothing is captured but IPv4 on the ports
it is given.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ctypes
import functools
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from testbed.callers import AUDIBLE_PEAK
from transceiver.backends.media_streams.g711 import ulaw_to_pcm16

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35  # Linux: SCM_TIMESTAMPNS, a struct timespec per packet
SO_RCVBUFFORCE = 33
ETH_HEADER = 14
ENCAP_V4 = 10  # common.encap.HEADER_LEN_V4
RTCP_TYPES = range(192, 224)  # RFC 5761: 192-223 in the second byte is RTCP, not RTP
C2R, R2T, T2R, R2C = "caller->relay", "relay->transceiver", "transceiver->relay", "relay->caller"
APPEND, DELTA = "input_audio_buffer.append", "response.output_audio.delta"
DEFLATE_TAIL = b"\x00\x00\xff\xff"


@dataclass(frozen=True)
class Ports:
    relay: int  # the relay's public UDP port (callers send there)
    media: int  # the transceiver's media UDP port (the relay sends there)
    agent: int  # the backend server's TCP port (the model server, the stand-in)


def rtp_key(payload: bytes) -> tuple[int, int] | None:
    """(SSRC, sequence number) of an RTP (or SRTP) packet; None for anything else."""
    if len(payload) < 12 or payload[0] >> 6 != 2 or payload[1] in RTCP_TYPES:
        return None
    return int.from_bytes(payload[8:12], "big"), int.from_bytes(payload[2:4], "big")


def pcm_peak(pcm: bytes) -> int:
    """The largest absolute sample of PCM16 (0 for none)."""
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype="<i2")
    return int(np.abs(samples.astype(np.int32)).max(initial=0))


def b64_bytes(text: Any) -> bytes:
    """Base64 text decoded (b"" for what is not)."""
    if not isinstance(text, str):
        return b""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return b""


def peak_of(audio_b64: Any) -> int:
    """The largest absolute sample of base64 PCM16 (0 for what is not)."""
    return pcm_peak(b64_bytes(audio_b64))


# What a backend protocol's message says, for the capture: ("session", name) names the
# connection's session, ("audio", peak) is audio with that peak, None is anything else.
Reading = tuple[str, Any] | None


def json_object(message: bytes) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        event = json.loads(message)
        if isinstance(event, dict):
            return event
    return {}


def read_realtime(upward: bool, binary: bool, message: bytes) -> Reading:
    """OpenAI's Realtime events: appends up, deltas down, the agent's session ids."""
    event = json_object(message)
    kind = event.get("type")
    if kind == "session.created" and not upward:
        parts = str(event.get("event_id", "")).split("_")
        return ("session", parts[1] if len(parts) == 3 else None)
    if kind == (APPEND if upward else DELTA):
        return ("audio", peak_of(event.get("audio" if upward else "delta")))
    return None


def read_native(upward: bool, binary: bool, message: bytes) -> Reading:
    """Our WebSocket protocol (docs/backend-protocol.md): binary PCM16 both ways (the
    benchmark's calls are pcm16), ``session.start`` first."""
    if binary:
        return ("audio", pcm_peak(message))
    event = json_object(message)
    if upward and event.get("type") == "session.start":
        return ("session", event.get("session_id"))
    return None


def read_media_streams(upward: bool, binary: bool, message: bytes) -> Reading:
    """Twilio's Media Streams (docs/media-streams.md): ``media`` both ways, ``start`` first."""
    event = json_object(message)
    kind = event.get("event")
    if kind == "start" and upward:
        call_sid = str((event.get("start") or {}).get("callSid", ""))
        return ("session", call_sid[2:] or None)
    if kind == "media":
        media = event.get("media")
        payload = b64_bytes(media.get("payload") if isinstance(media, dict) else None)
        return ("audio", pcm_peak(ulaw_to_pcm16(payload)))
    return None


def read_grpc(upward: bool, binary: bool, message: bytes) -> Reading:
    """Our gRPC protocol (docs/backend-protocol.md, "The gRPC protocol"): one gRPC message,
    a ``ToBackend`` up (``start`` first, then ``pcm16``: the benchmark's calls are pcm16), a
    ``FromBackend`` down (``pcm16``); what does not parse is nothing."""
    to_backend, from_backend, decode_error = grpc_messages()
    try:
        parsed = (to_backend if upward else from_backend).FromString(message)
    except decode_error:
        return None
    kind = parsed.WhichOneof("kind")
    if kind == "pcm16":
        return ("audio", pcm_peak(parsed.pcm16.pcm))
    if kind == "start" and upward:
        return ("session", parsed.start.session_id or None)
    return None


@functools.cache
def grpc_messages() -> tuple[Any, Any, type[Exception]]:
    """``ToBackend``, ``FromBackend`` (generated from ``rtcedge.backend.v1``) and protobuf's
    ``DecodeError``, imported at the first gRPC message: the grpc extra's protobuf is not
    needed by the other wires."""
    from google.protobuf.message import DecodeError

    from transceiver.backends.grpc.v1 import backend_pb2 as pb

    return pb.ToBackend, pb.FromBackend, DecodeError


WireReader = Callable[[bool, bool, bytes], Reading]
WIRES: dict[str, WireReader] = {
    "realtime": read_realtime,
    "websocket": read_native,
    "media-streams": read_media_streams,
    "grpc": read_grpc,
}


@dataclass
class TcpDirection:
    """One direction of a TCP connection: its bytes in order, from segments (retransmissions
    dropped; a gap, never seen on loopback, starts again at the segment after it)."""

    buffer: bytearray = field(default_factory=bytearray)
    next_seq: int | None = None
    loud: bool = False  # the last audio message had sound

    def take(self, seq: int, data: bytes) -> bool:
        """Append what is new in a segment; False when nothing was."""
        if self.next_seq is None:
            self.next_seq = seq
        skip = (self.next_seq - seq) & 0xFFFFFFFF
        if skip >= 0x80000000:  # a gap (never on loopback): start again at this segment
            self.buffer.clear()
            self.next_seq, skip = seq, 0
            self.restart()
        if skip >= len(data):
            return False  # a retransmission of bytes already taken
        self.buffer += data[skip:]
        self.next_seq = (self.next_seq + len(data) - skip) & 0xFFFFFFFF
        return True

    def restart(self) -> None:
        """Forget the protocol's state after a gap (the subclass's)."""

    def segment(self, seq: int, data: bytes) -> list[tuple[bool, bytes]]:
        """A TCP segment's payload; the whole messages it completed: (binary, bytes)."""
        raise NotImplementedError


@dataclass
class WsDirection(TcpDirection):
    """One direction of a WebSocket over TCP: HTTP first, then frames."""

    masked: bool = False  # client -> server
    upgraded: bool = False
    deflate: Any = None  # a zlib decompressor, once the upgrade agreed on permessage-deflate
    message: bytearray = field(default_factory=bytearray)
    compressed: bool = False
    binary: bool = False  # the message being reassembled is binary (opcode 2)

    def segment(self, seq: int, data: bytes) -> list[tuple[bool, bytes]]:
        if not self.take(seq, data):
            return []
        if not self.upgraded:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return []
            if b"permessage-deflate" in bytes(self.buffer[:end]).lower():
                self.deflate = zlib.decompressobj(-zlib.MAX_WBITS)
            del self.buffer[: end + 4]
            self.upgraded = True
        return list(self._frames())

    def _frames(self) -> Any:
        buf = self.buffer
        while len(buf) >= 2:
            fin, rsv1, opcode = buf[0] & 0x80, buf[0] & 0x40, buf[0] & 0x0F
            masked, length, pos = buf[1] & 0x80, buf[1] & 0x7F, 2
            if length == 126:
                if len(buf) < 4:
                    return
                length, pos = struct.unpack_from("!H", buf, 2)[0], 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length, pos = struct.unpack_from("!Q", buf, 2)[0], 10
            mask = bytes(buf[pos : pos + 4]) if masked else b""
            pos += len(mask)
            if len(buf) < pos + length:
                return
            payload = bytes(buf[pos : pos + length])
            del buf[: pos + length]
            if mask:
                payload = unmask(payload, mask)
            if opcode in (1, 2):
                self.message, self.compressed = bytearray(payload), bool(rsv1)
                self.binary = opcode == 2
            elif opcode == 0:
                self.message += payload
            else:
                continue  # control frames: ping, pong, close
            if fin:
                yield self.binary, self._inflate(bytes(self.message))

    def _inflate(self, data: bytes) -> bytes:
        if not self.compressed or self.deflate is None:
            return data
        try:
            return self.deflate.decompress(data + DEFLATE_TAIL)
        except zlib.error:
            return b""


def unmask(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    key = np.frombuffer((mask * (n // 4 + 1))[:n], dtype=np.uint8)
    return (np.frombuffer(payload, dtype=np.uint8) ^ key).tobytes()


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 3.4: the client's first bytes
H2_FRAME_HEADER = 9  # RFC 9113 4.1: length (24 bits), type, flags, stream id (31 bits)
H2_DATA, H2_END_STREAM, H2_PADDED = 0x0, 0x1, 0x8
GRPC_PREFIX = 5  # gRPC over HTTP/2: compressed flag (1 byte), length (4 bytes, big-endian)
GRPC_MAX_MESSAGE = 4 << 20  # grpc's default receive bound: a longer prefix is not a message


@dataclass
class Http2Direction(TcpDirection):
    """One direction of a cleartext HTTP/2 connection carrying gRPC: the client's preface
    (``preface``: client -> server), then frames; only DATA matters (HEADERS, SETTINGS,
    WINDOW_UPDATE, PING... are skipped: HPACK is not read), its payloads concatenated per
    HTTP/2 stream into gRPC's length-prefixed messages, whole messages yielded as binary."""

    preface: bool = False
    streams: dict[int, bytearray] = field(default_factory=dict)  # DATA not yet a whole message
    bad_frames: int = 0  # a preface that is not one, padding past the frame: counted, skipped
    not_http2: bool = False  # the client's first bytes were not the preface

    def restart(self) -> None:
        self.streams.clear()

    def segment(self, seq: int, data: bytes) -> list[tuple[bool, bytes]]:
        if not self.take(seq, data):
            return []
        buf = self.buffer
        if self.preface:
            if len(buf) < len(H2_PREFACE):
                return []
            if buf[: len(H2_PREFACE)] != H2_PREFACE:
                self.bad_frames += 1  # not HTTP/2 with prior knowledge: nothing of it is read
                self.not_http2 = True
            del buf[: len(H2_PREFACE)]
            self.preface = False
        if self.not_http2:
            buf.clear()
            return []
        out: list[tuple[bool, bytes]] = []
        while len(buf) >= H2_FRAME_HEADER:
            length = int.from_bytes(buf[:3], "big")
            kind, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            end = H2_FRAME_HEADER + length
            if len(buf) < end:
                break
            if kind == H2_DATA:
                self._data(stream, flags, bytes(buf[H2_FRAME_HEADER:end]), out)
            del buf[:end]
        return out

    def _data(self, stream: int, flags: int, payload: bytes, out: list[tuple[bool, bytes]]) -> None:
        if flags & H2_PADDED:  # RFC 9113 6.1: a pad length byte, the data, that many zeros
            pad = payload[0] if payload else 0
            if not payload or pad >= len(payload):
                self.bad_frames += 1
                return
            payload = payload[1 : len(payload) - pad]
        pending = self.streams.setdefault(stream, bytearray())
        pending += payload
        while len(pending) >= GRPC_PREFIX:
            size = int.from_bytes(pending[1:GRPC_PREFIX], "big")
            if size > GRPC_MAX_MESSAGE:  # not gRPC: drop what the stream holds
                self.bad_frames += 1
                pending.clear()
                break
            if len(pending) < GRPC_PREFIX + size:
                break
            compressed = pending[0] & 1
            message = bytes(pending[GRPC_PREFIX : GRPC_PREFIX + size])
            del pending[: GRPC_PREFIX + size]
            out.append((True, gunzip(message) if compressed else message))
        if flags & H2_END_STREAM:
            self.streams.pop(stream, None)


def gunzip(message: bytes) -> bytes:
    """A compressed gRPC message (grpc-encoding gzip, the one the transceiver could get);
    b"" for what does not inflate."""
    try:
        return zlib.decompress(message, wbits=31)
    except zlib.error:
        return b""


Framing = Callable[[bool], TcpDirection]  # upward (client -> server) -> a direction's reader


def websocket_direction(upward: bool) -> TcpDirection:
    return WsDirection(masked=upward)


def http2_direction(upward: bool) -> TcpDirection:
    return Http2Direction(preface=upward)


# How each wire's messages are carried: a WebSocket unless named here.
FRAMINGS: dict[str, Framing] = {"grpc": http2_direction}


@dataclass
class Connection:
    """A connection between the transceiver and the backend's server (a WebSocket, or an
    HTTP/2 connection: one per call either way)."""

    up: TcpDirection = field(default_factory=lambda: WsDirection(masked=True))
    down: TcpDirection = field(default_factory=lambda: WsDirection(masked=False))
    session: str | None = None
    appends: list[float] = field(default_factory=list)  # sound after silence sent up
    deltas: list[float] = field(default_factory=list)  # sound after silence sent down


class Capture:
    """What ``feed`` saw: each RTP packet's time per hop, each backend connection's onsets,
    its messages framed by ``framing`` and read by ``wire`` (``FRAMINGS``, ``WIRES``: the
    backend's protocol)."""

    def __init__(
        self, ports: Ports, wire: WireReader = read_realtime, framing: Framing = websocket_direction
    ) -> None:
        self.ports = ports
        self.wire = wire
        self.framing = framing
        self.rtp: dict[tuple[str, int, int], float] = {}  # (hop, SSRC, seq) -> time
        self.connections: dict[int, Connection] = {}  # by the transceiver's TCP port
        self.packets = 0

    def feed(self, t: float, frame: bytes) -> None:
        """One frame from ``lo`` (Ethernet header, IPv4) sent at ``t``."""
        if len(frame) < ETH_HEADER + 20 or frame[12:14] != b"\x08\x00":
            return
        ip = ETH_HEADER
        ihl, proto = (frame[ip] & 0x0F) * 4, frame[ip + 9]
        end = ip + struct.unpack_from("!H", frame, ip + 2)[0]
        l4 = ip + ihl
        src, dst = struct.unpack_from("!HH", frame, l4)
        if proto == 17:
            self._udp(t, src, dst, frame[l4 + 8 : end])
        elif proto == 6 and self.ports.agent in (src, dst):
            seq = struct.unpack_from("!I", frame, l4 + 4)[0]
            data = frame[l4 + (frame[l4 + 12] >> 4) * 4 : end]
            if data:
                self._tcp(t, src, dst, seq, data)

    def _udp(self, t: float, src: int, dst: int, payload: bytes) -> None:
        ports = self.ports
        if dst == ports.relay:
            hop, body = C2R, payload
        elif src == ports.relay:
            hop, body = R2C, payload
        elif dst == ports.media and payload[:1] == b"\xff":
            hop, body = R2T, payload[ENCAP_V4:]
        elif src == ports.media and payload[:1] == b"\xff":
            hop, body = T2R, payload[ENCAP_V4:]
        else:
            return
        key = rtp_key(body)
        if key is not None:
            self.packets += 1
            self.rtp[(hop, *key)] = t

    def _tcp(self, t: float, src: int, dst: int, seq: int, data: bytes) -> None:
        upward = dst == self.ports.agent
        port = src if upward else dst
        conn = self.connections.get(port)
        if conn is None:
            conn = self.connections[port] = Connection(self.framing(True), self.framing(False))
        direction = conn.up if upward else conn.down
        for binary, message in direction.segment(seq, data):
            reading = self.wire(upward, binary, message)
            if reading is None:
                continue
            kind, value = reading
            if kind == "session":
                conn.session = conn.session or value
                continue
            loud = value >= AUDIBLE_PEAK
            if loud and not direction.loud:
                (conn.appends if upward else conn.deltas).append(t)
            direction.loud = loud

    def by_session(self) -> dict[str, Connection]:
        return {c.session: c for c in self.connections.values() if c.session}


# Classic BPF (linux/filter.h): the kernel passes only the outgoing copy of IPv4 UDP or TCP
# with one of our ports at either end, so that the thread never sees the rest of ``lo``.
SO_ATTACH_FILTER = 26
SKF_AD_PKTTYPE = 0xFFFFF000 + 4  # SKF_AD_OFF + SKF_AD_PKTTYPE: the packet's direction
LD_W_ABS, LD_H_ABS, LD_B_ABS, LDX_B_MSH, LD_H_IND = 0x20, 0x28, 0x30, 0xB1, 0x48
JEQ_K, RET_K = 0x15, 0x06


def port_filter(ports: Ports) -> list[tuple[int, int, int, int]]:
    """The filter's instructions (code, jump if true, jump if false, k)."""
    wanted = (ports.relay, ports.media, ports.agent)
    n = len(wanted)
    # Layout: 0 pkttype, 1 jeq, 2 ethertype, 3 jeq, 4 proto, 5 jeq udp, 6 jeq tcp, 7 ldx,
    # 8 src port, n jeqs, dst port, n jeqs, drop (where the last one falls through), accept.
    drop = 8 + 1 + n + 1 + n
    accept = drop + 1
    code: list[tuple[int, int, int, int]] = [
        (LD_W_ABS, 0, 0, SKF_AD_PKTTYPE),
        (JEQ_K, 0, drop - 2, PACKET_OUTGOING),
        (LD_H_ABS, 0, 0, 12),
        (JEQ_K, 0, drop - 4, 0x0800),
        (LD_B_ABS, 0, 0, ETH_HEADER + 9),
        (JEQ_K, 1, 0, 17),
        (JEQ_K, 0, drop - 7, 6),
        (LDX_B_MSH, 0, 0, ETH_HEADER),
    ]
    for offset in (ETH_HEADER, ETH_HEADER + 2):  # source port, then destination port
        code.append((LD_H_IND, 0, 0, offset))
        for port in wanted:
            code.append((JEQ_K, accept - len(code) - 1, 0, port))
    code += [(RET_K, 0, 0, 0), (RET_K, 0, 0, 1 << 18)]
    return code


def attach_filter(sock: socket.socket, code: list[tuple[int, int, int, int]]) -> None:
    """SO_ATTACH_FILTER with ``code`` (the kernel copies the program)."""
    program = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in code))
    fprog = struct.pack("HL", len(code), ctypes.addressof(program))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class CaptureThread:
    """``Capture`` fed from an ``AF_PACKET`` socket on ``lo`` in a thread, until ``stop``."""

    def __init__(self, capture: Capture) -> None:
        self.capture = capture
        self.error = ""
        self.cpu_s = 0.0  # the thread's CPU time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def start(self) -> bool:
        """Open the socket (False, with ``error``, where this process may not) and read."""
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            attach_filter(sock, port_filter(self.capture.ports))
            sock.bind(("lo", 0))
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            with contextlib.suppress(OSError):  # past net.core.rmem_max: root may
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
            sock.settimeout(0.2)
        except (OSError, AttributeError) as exc:
            self.error = f"no loopback capture here ({exc}): needs root or CAP_NET_RAW on Linux"
            return False
        self._sock = sock
        self._thread = threading.Thread(target=self._run, daemon=True, name="loopback-capture")
        self._thread.start()
        return True

    def _run(self) -> None:
        assert self._sock is not None
        sock, feed = self._sock, self.capture.feed
        started = time.thread_time()
        ancillary = socket.CMSG_SPACE(16)
        try:
            while not self._stop.is_set():
                try:
                    frame, anc, _flags, address = sock.recvmsg(1 << 18, ancillary)
                except TimeoutError:
                    continue
                if address[2] != PACKET_OUTGOING:
                    continue  # each loopback packet is seen twice: sent and received
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = struct.unpack("qq", data[:16])
                        feed(sec + nsec / 1e9, frame)
        except OSError as exc:
            self.error = f"loopback capture stopped: {exc}"
        finally:
            self.cpu_s = time.thread_time() - started

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
