"""Abuse of the relay's ICE-TCP path (issue 21), with a real relay process, real TCP and UDP
sockets and stand-in transceivers: one connection streaming tiny frames at full speed, and
thousands of admitted connections that their clients keep refreshing. Everything is counted:
datagrams that reached a transceiver's socket, the relay's drop and close counters, a victim UDP
flow's echoes; no figure of time is asserted (bench/relay_tcp_flood.py measures the RTTs)."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator

from common import stun
from testbed.processes import RelayProcess
from testbed.procfs import udp_drops
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import FramedClient, collect, udp_client
from tests.support.waits import wait_for

VICTIM, ANSWERS, SILENT = 3, 4, 2  # transceiver ids
ATTACK_S = 3.0
ATTACK_MAX_BYTES = 64 << 20  # the attack's bound in bytes, beside its bound in seconds
TINY_FRAMES = b"\x00\x02\x00\x01" * 16384  # 4-byte frames: 2-byte STUN-looking payloads
FRAME_RATE = 500  # --tcp-frame-rate of these tests: a confirmed connection's budget


def tcp_drops(relay: RelayProcess, reason: str) -> float:
    return relay.metric("rtcedge_relay_dropped_packets_total", reason=reason, transport="tcp")


def closed(relay: RelayProcess, reason: str) -> float:
    return relay.metric("rtcedge_relay_tcp_connections_closed_total", reason=reason)


class Sink:
    """A transceiver that never answers: a socket read by a thread, counting datagrams (and
    what the kernel dropped at it), so a flood forwarded to it is counted, never lost."""

    def __init__(self) -> None:
        self.sock = udp_client()
        self.address = self.sock.getsockname()
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            with contextlib.suppress(BlockingIOError):
                while True:
                    self.sock.recv(4096)
                    self.count += 1

    def total(self) -> int:
        return self.count + udp_drops(self.address[1])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@contextlib.contextmanager
def one_worker_relay(*extra: str) -> Iterator[tuple[RelayProcess, StandInTransceiver, Sink]]:
    """One worker (victim and attacker share it); transceiver VICTIM echoes, ANSWERS answers
    checks and sinks media, SILENT never answers (a call already ended)."""
    sink = Sink()
    with (
        StandInTransceiver(VICTIM) as victim,
        StandInTransceiver(ANSWERS, echo=False) as answers,
        RelayProcess(
            {VICTIM: victim.address, ANSWERS: answers.address, SILENT: sink.address},
            workers=1,
            tcp=True,
            extra_args=["--tcp-frame-rate", str(FRAME_RATE), *extra],
        ) as relay,
    ):
        relay.answers = answers  # type: ignore[attr-defined]
        yield relay, victim, sink
    sink.close()


def victim_flow(relay: RelayProcess) -> socket.socket:
    """A UDP call's flow through the worker, confirmed by its transceiver's answer."""
    call = udp_client()
    call.sendto(hint_request(relay.keyring, relay.cluster, VICTIM)[0], relay.address)
    assert len(collect([call], 1)[call]) == 1
    return call


def pings(call: socket.socket, relay: RelayProcess, count: int, every_s: float) -> set[int]:
    """Send ``count`` RTP-like datagrams on the victim's flow, one every ``every_s``; the
    sequence numbers echoed back (read until one second after the last)."""
    echoed: set[int] = set()
    last = time.monotonic()
    for i in range(count):
        call.sendto(b"\x80" + i.to_bytes(4, "big") + bytes(160), relay.address)
        last = time.monotonic() + 1.0
        _read_echoes(call, echoed, every_s)
    while len(echoed) < count and time.monotonic() < last:
        _read_echoes(call, echoed, 0.05)
    return echoed


def _read_echoes(call: socket.socket, echoed: set[int], wait_s: float) -> None:
    if select.select([call], [], [], wait_s)[0]:
        with contextlib.suppress(BlockingIOError):
            while True:
                data = call.recv(4096)
                if data.startswith(b"T3:\x80"):
                    echoed.add(int.from_bytes(data[4:8], "big"))


def stream(sock: socket.socket, chunk: bytes, seconds: float, max_bytes: int) -> int:
    """Send ``chunk`` over and over as fast as the connection takes it, for at most ``seconds``
    and ``max_bytes``; returns the bytes sent."""
    sock.setblocking(False)
    sent = 0
    deadline = time.monotonic() + seconds
    while sent < max_bytes and time.monotonic() < deadline:
        if not select.select([], [sock], [], 0.05)[1]:
            continue
        try:
            sent += sock.send(chunk)
        except BlockingIOError:
            continue
        except OSError:  # the relay closed it
            break
    return sent


def admitted(relay: RelayProcess, tid: int) -> FramedClient:
    client = FramedClient(relay.tcp_address)
    client.send(hint_request(relay.keyring, relay.cluster, tid)[0])
    return client


def attack_beside_a_victim(relay: RelayProcess, attacker: FramedClient, chunk: bytes) -> set[int]:
    """Stream ``chunk`` from ``attacker`` for ATTACK_S while the victim's flow sends 300 pings;
    the victim's echoed pings."""
    call = victim_flow(relay)
    got: set[int] = set()
    victim = threading.Thread(target=lambda: got.update(pings(call, relay, 300, ATTACK_S / 300)))
    victim.start()
    stream(attacker.sock, chunk, ATTACK_S, ATTACK_MAX_BYTES)
    victim.join(timeout=30)
    call.close()
    return got


def test_tiny_frames_of_an_unconfirmed_connection_reach_no_transceiver_and_spare_a_udp_call():
    with one_worker_relay() as (relay, _, sink):
        attacker = admitted(relay, SILENT)  # a hint of a call its transceiver no longer answers
        assert wait_for(sink.total, 1), "the first frame was admitted and forwarded"
        echoed = attack_beside_a_victim(relay, attacker, TINY_FRAMES)
        # Nothing beyond the first frame: a 2-byte payload is below every class's floor.
        assert sink.total() == 1, f"{sink.total() - 1} tiny frames reached the transceiver"
        assert wait_for(lambda: tcp_drops(relay, "frame_too_short") > 0, True)
        assert len(echoed) >= 297, f"the victim's flow lost {300 - len(echoed)} of 300"
        attacker.close()


def test_a_confirmed_connection_streaming_frames_is_held_to_its_budget_and_spares_a_udp_call():
    with one_worker_relay() as (relay, _, _):
        answers: StandInTransceiver = relay.answers  # type: ignore[attr-defined]
        attacker = admitted(relay, ANSWERS)
        (reply,) = attacker.frames(1)
        assert stun.parse(reply).msg_type == stun.BINDING_SUCCESS  # confirmed
        address = attacker.address
        smallest_rtp = b"\x00\x0c\x80" + bytes(11)  # 12-byte payloads, at the floor
        started = time.monotonic()
        echoed = attack_beside_a_victim(relay, attacker, smallest_rtp * 4096)
        # Counted now: what the kernel still holds for the connection is read later, at its rate.
        elapsed_s = time.monotonic() - started
        forwarded = sum(1 for ip, port, _ in answers.received if (ip, port) == address) - 1
        attacker.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        attacker.close()  # a reset: the relay forgets it even while not reading it
        assert wait_for(lambda: closed(relay, "client_closed"), 1)
        assert forwarded > 0
        budget = FRAME_RATE * (elapsed_s + 1) + FRAME_RATE / 4  # the rate, and its burst
        assert forwarded <= budget, f"{forwarded} frames forwarded, budget {budget:.0f}"
        # Paused at most about once a tick (a paused connection is not polled for reading).
        paused = relay.metric("rtcedge_relay_tcp_reads_paused_total")
        assert 0 < paused <= 2 * (time.monotonic() - started + 2)
        assert len(echoed) >= 297, f"the victim's flow lost {300 - len(echoed)} of 300"


CONNECTIONS, PREFIXES, HINTS = 4096, 64, 512
PENDING_TTL_S = 2


def test_admitted_connections_kept_busy_by_their_clients_close_after_the_pending_ttl():
    """4,096 admitted connections (64 /24s, 512 hints) whose transceiver never answers, each
    refreshed by its client with a 22-byte frame every half second, fill the worker's table
    (--tcp-max-connections 4096). They close after the pending TTL (plus the tick), whatever
    their clients send, and a new ICE-TCP caller then gets through."""
    with one_worker_relay(
        "--pending-ttl",
        str(PENDING_TTL_S),
        "--transceiver-stun-rate",
        "100000",  # not what is tested here: every first frame of the flood is let through
    ) as (relay, _, sink):
        hints = [hint_request(relay.keyring, relay.cluster, SILENT)[1] for _ in range(HINTS)]
        conns: list[socket.socket] = []
        try:
            for i in range(CONNECTIONS):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                conns.append(s)
                s.bind((f"127.0.{1 + i % PREFIXES}.1", 0))
                s.settimeout(5)
                s.connect(relay.tcp_address)
                request = stun.binding_request(f"{hints[i % HINTS]}:cli{i}", bytes(12))
                s.sendall(len(request).to_bytes(2, "big") + request)
            assert wait_for(sink.total, CONNECTIONS, timeout_s=20), "every one was admitted"
            keepalive = b"\x00\x16\x00\x01\x00\x02" + bytes(18)  # one 22-byte frame
            live = list(conns)
            deadline = time.monotonic() + 3 * PENDING_TTL_S + 10
            while live and time.monotonic() < deadline:
                still = []
                for s in live:
                    try:
                        s.send(keepalive)
                        still.append(s)
                    except OSError:  # reset by the relay
                        pass
                live = still
                time.sleep(0.5)
            assert not live, f"{len(live)} connections still open"
            assert closed(relay, "unconfirmed_timeout") == CONNECTIONS
            assert closed(relay, "full") == 0
            # A new caller connects and its first check reaches its transceiver.
            fresh = admitted(relay, ANSWERS)
            (reply,) = fresh.frames(1)
            assert stun.parse(reply).msg_type == stun.BINDING_SUCCESS
            fresh.close()
        finally:
            for s in conns:
                s.close()


def test_hinted_checks_from_many_prefixes_reach_one_transceiver_within_its_budget():
    """The per-prefix first-packet budget bounds one network; --transceiver-stun-rate bounds
    what all of them together forward to one transceiver (here 50/s; 40 /24s x 10 checks)."""
    rate = 50
    with one_worker_relay("--transceiver-stun-rate", str(rate)) as (relay, _, sink):
        sources = []
        for p in range(40):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((f"127.0.{100 + p}.1", 0))
            sources.append(s)
        started = time.monotonic()
        try:
            for _ in range(10):
                for s in sources:
                    s.sendto(hint_request(relay.keyring, relay.cluster, SILENT)[0], relay.address)
            udp = "rtcedge_relay_dropped_packets_total"
            assert wait_for(
                lambda: sink.total() + relay.metric(udp, reason="transceiver_stun_rate"), 400
            ), "every check was forwarded or dropped by the transceiver's budget"
        finally:
            for s in sources:
                s.close()
        budget = rate * (time.monotonic() - started + 1) + rate  # the rate, and its burst
        assert sink.total() <= budget, f"{sink.total()} checks forwarded, budget {budget:.0f}"
        # A call to another transceiver is not affected.
        victim_flow(relay).close()
