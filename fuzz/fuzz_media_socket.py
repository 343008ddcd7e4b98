"""Target ``media_socket``: the transceiver's datagram entry point, ``MediaSocket``.

A real ``Demux`` and ``TransceiverMetrics`` behind ``MediaSocket.datagram_received``, which asks
``transceiver.socket.classify.Classifier`` (relay decapsulation and allowlist, STUN parse guards,
demultiplexing) and delivers; three stand-in sessions whose ICE agent records what it gets and
answers through ``MediaSocket.send``, and a transport that records ``sendto``. The input is a
script (fuzz.script): the configuration, then which source, relay or direct, what payload.

Findings: an exception escaping ``datagram_received`` or ``send``; a datagram neither delivered
once nor dropped once, or dropped for a reason the classifier and the socket do not name; a
delivery to a session its client address was not proven for (model in fuzz.script), or of other
bytes than the decapsulated payload; behind ``--relay-network``, a delivery of a direct datagram
or of one encapsulated by a non-relay; a datagram sent to anyone who did not authenticate for the
sending session; a media path that no check established.

The stand-in runs aioice's STUN parser exactly where the real session's ``StunProtocol`` would:
any exception from it is a finding too (the classifier must never hand aioice a datagram its
parser raises on; ValueError included, which aioice would take for DTLS).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import atheris

from fuzz.harness import main, require

with atheris.instrument_imports(
    include=[
        "common",
        "transceiver.socket.demux",
        "transceiver.socket.classify",
        "transceiver.socket.media",
        "aioice.stun",
    ]
):
    from aioice import stun as aioice_stun

    from common import encap
    from transceiver.metrics import TransceiverMetrics
    from transceiver.socket.classify import DROP_REASONS
    from transceiver.socket.demux import Demux
    from transceiver.socket.media import NO_PATH, SESSION_ERROR, MediaSocket

from fuzz import script  # after the modules under test: it imports common

RELAY_NETWORKS = tuple(f"{host}/32" for host, _ in script.RELAYS)
KNOWN_REASONS = {*DROP_REASONS, SESSION_ERROR, NO_PATH}
METRICS = TransceiverMetrics()  # one registry per process, as in the transceiver
# MediaSocket logs a traceback per session error; the harness counts them instead.
logging.getLogger("rtcedge.transceiver").disabled = True


def media_of(slot: script.Slot) -> bytes:
    """What a session sends along its media path (RTP-like first byte)."""
    return b"\x80media" + bytes([slot.index, slot.generation & 0xFF])


def stun_of(slot: script.Slot) -> bytes:
    """What a session sends to one address (a STUN answer or check: first byte below 4)."""
    return b"\x01\x01stun" + bytes([slot.index, slot.generation & 0xFF])


class Transport:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, tuple]] = []

    def sendto(self, data: bytes, addr: tuple) -> None:
        self.sent.append((bytes(data), addr))


class Harness:
    def __init__(self, config: script.Config) -> None:
        self.config = config
        self.slots = script.make_slots()
        self.demux: Demux = Demux()
        networks = RELAY_NETWORKS if config.relay_networks else ()
        self.media = MediaSocket(self.demux, METRICS, relay_networks=networks)
        self.transport = Transport()
        self.media.connection_made(self.transport)  # type: ignore[arg-type]
        self.drops: list[str] = []
        self.violations: list[str] = []
        self.deliveries: list[tuple[script.Slot, bytes, tuple]] = []
        drop = self.media.drop

        def record_drop(reason: str) -> None:
            self.drops.append(reason)
            drop(reason)

        self.media.drop = record_drop  # type: ignore[method-assign]
        for slot in self.slots:
            self.register(slot)

    def register(self, slot: script.Slot) -> None:
        generation = slot.generation
        session_id = f"s{slot.index}g{generation}"

        def datagram_received(data: bytes, addr: tuple) -> None:
            # Not require(): MediaSocket catches every Exception a session raises.
            if slot.generation != generation:
                self.violations.append(f"delivered to ended session {session_id}")
            self.deliver(slot, data, addr)

        ice = SimpleNamespace(datagram_received=datagram_received)
        lifecycle = SimpleNamespace(check_received=lambda now: None)
        slot.session = SimpleNamespace(id=session_id, ice=ice, lifecycle=lifecycle)
        self.demux.add(slot.ufrag, slot.password, slot.session)

    def deliver(self, slot: script.Slot, data: bytes, addr: tuple) -> None:
        """The stand-in ICE agent: record, parse as aioice would, answer."""
        self.deliveries.append((slot, bytes(data), addr))
        if data[0] < 4:
            try:
                aioice_stun.parse_message(bytes(data))
            except Exception as exc:
                self.violations.append(f"aioice raised {exc!r} on a delivered datagram")
                raise
            # aioice answers a check to the address it came from; a success response to one of
            # its own checks is the round trip after which ICE moves the media there.
            self.media.send(slot.ufrag, stun_of(slot), (addr[0], addr[1]))
            if data[:2] == b"\x01\x01":
                self.demux.select(slot.ufrag, (addr[0], addr[1]))
        if self.demux.path(slot.ufrag) is not None:  # media flows once ICE has a path
            self.media.send(slot.ufrag, media_of(slot))

    def run_step(self, step: script.Step) -> None:
        if step.kind == script.CONTROL:
            self.control(step)
        else:
            self.datagram(step)
        self.check_sent()
        self.check_paths()

    def control(self, step: script.Step) -> None:
        slot = self.slots[step.arg % len(self.slots)]
        action = (step.arg >> 2) & 3
        if action == script.REMOVE and slot.present:
            self.demux.remove(slot.ufrag)
            slot.present = False
        elif action == script.READD and not slot.present:
            slot.renew()
            self.register(slot)
        elif slot.present:  # a check toward any address, then media along the path
            self.media.send(slot.ufrag, stun_of(slot), script.SOURCES[step.source][:2])
            self.media.send(slot.ufrag, media_of(slot))

    def datagram(self, step: script.Step) -> None:
        data, addr = script.datagram(step, self.slots)
        expected = script.received(data, addr) if data else None
        if expected is not None and self.config.relay_networks:
            # Behind relays: encapsulated only by a relay, never straight from a client.
            expected = expected if self.config.trusted_relay(expected[1]) else None
        if expected is not None:
            client, relay, payload = expected
            script.learn(self.slots, payload, (client, relay))
        self.drops.clear()
        self.deliveries.clear()
        self.media.datagram_received(data, addr)
        require(not self.violations, "; ".join(self.violations))

        errors = self.drops.count(SESSION_ERROR)
        others = [r for r in self.drops if r != SESSION_ERROR]
        require(set(self.drops) <= KNOWN_REASONS, f"unnamed drop reasons {self.drops}")
        if self.deliveries:
            require(len(self.deliveries) == 1 and not others, "delivered and dropped, or twice")
            require(errors <= 1, "more than one session error for one datagram")
        else:
            require(len(others) == 1 and not errors, f"not accounted exactly once: {self.drops}")
            return
        slot, got, client_addr = self.deliveries[0]
        require(expected is not None, "delivered a datagram the model cannot decode")
        client, _, payload = expected
        require(got == payload, "delivered bytes differ from the decapsulated payload")
        require(script.addr_key(client_addr) == client, "delivered with another client address")
        require(slot.present and slot.session is not None, "delivered to an ended session")
        require(client in slot.clients(), f"delivered to session {slot.index} unproven")

    def check_sent(self) -> None:
        for data, dest in self.transport.sent:
            if data[:1] == b"\xff":
                _, packed, port, _, offset = encap.decode_packed(data)
                client, relay = (packed, port), script.addr_key(dest)
            else:
                offset, client, relay = 0, script.addr_key(dest), None
            body = data[offset:]
            owners = [s for s in self.slots if body in (media_of(s), stun_of(s))]
            require(len(owners) == 1, f"sent bytes no session wrote: {data.hex()}")
            allowed = script.may_send(self.config, owners[0], client, relay)
            require(allowed, f"sent to {client} via {relay}")
        self.transport.sent.clear()

    def check_paths(self) -> None:
        for slot in self.slots:
            path = self.demux.path(slot.ufrag) if slot.present else None
            if path is not None:
                client = script.addr_key(path.client)
                relay = script.addr_key(path.relay) if path.relay is not None else None
                allowed = script.path_allowed(self.config, slot, client, relay)
                require(allowed, f"session {slot.index} latched to {path} without a check")


def test_one_input(data: bytes) -> None:
    harness = Harness(script.config(data))
    for step in script.steps(data):
        harness.run_step(step)


if __name__ == "__main__":
    main(test_one_input)
