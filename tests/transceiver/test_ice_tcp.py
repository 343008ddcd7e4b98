"""The transceiver's side of ICE over TCP, without sockets: a datagram a relay flagged FLAG_TCP
names a TCP client (classify), replies to it keep the flag (media), and the ICE agent advertises
a passive TCP candidate below the UDP ones and pairs TCP checks on a protocol of their own."""

from __future__ import annotations

import secrets

from aioice.ice import CandidatePair

from common import encap, stun
from common.addr import is_tcp, over_tcp
from tests.support.waits import run
from tests.transceiver import test_ice, test_media
from tests.transceiver.test_ice import Recorder
from tests.transceiver.test_media import RELAY, StandIn, socket_with
from transceiver.socket.classify import Classifier, Delivery
from transceiver.socket.demux import Demux

CLIENT = ("198.51.100.7", 50000)
ADVERTISED_TCP = ("203.0.113.5", 443)


UFRAG, PASSWORD = test_media.UFRAG, test_media.PASSWORD  # the socket's session
check = test_media.check


def ice_check() -> bytes:
    """A check for test_ice's session (its credentials)."""
    key = test_ice.PASSWORD.encode()
    return stun.binding_request(f"{test_ice.UFRAG}:cli", secrets.token_bytes(12), integrity_key=key)


def test_a_tcp_client_is_not_the_udp_client_of_the_same_address():
    demux: Demux[str] = Demux()
    demux.add(UFRAG, PASSWORD, "A")
    c = Classifier(demux, ("10.0.0.0/24",))
    first = check()
    tcp = encap.encapsulate(first, *CLIENT, flags=encap.FLAG_TCP)
    assert c.classify(tcp, RELAY) == Delivery("A", over_tcp(CLIENT), first, learned=True)
    assert is_tcp(over_tcp(CLIENT)) and not is_tcp(CLIENT)
    # The same address over UDP is another client, learned by its own check.
    assert c.classify(encap.encapsulate(b"\x80rtp", *CLIENT), RELAY).reason == "unknown_address"
    second = check()
    udp = c.classify(encap.encapsulate(second, *CLIENT), RELAY)
    assert udp == Delivery("A", CLIENT, second, learned=True)


def test_replies_to_a_tcp_client_keep_the_flag():
    media, _, transport = socket_with(StandIn())
    client = over_tcp(CLIENT)
    media.datagram_received(encap.encapsulate(check(), *CLIENT, flags=encap.FLAG_TCP), RELAY)
    media.send(UFRAG, b"\x01\x01answer", client)
    media.demux.select(UFRAG, client)
    media.send(UFRAG, b"\x17dtls")
    header = encap.encode_header(*CLIENT, flags=encap.FLAG_TCP)
    assert transport.sent == [(header + b"\x01\x01answer", RELAY), (header + b"\x17dtls", RELAY)]


def test_the_answer_names_a_passive_tcp_candidate_below_the_udp_one():
    async def go():
        conn = await Recorder().connection(ADVERTISED_TCP)
        udp, tcp = conn.local_candidates
        assert (tcp.host, tcp.port, tcp.transport, tcp.tcptype) == (
            *ADVERTISED_TCP,
            "tcp",
            "passive",
        )
        assert tcp.priority < udp.priority and tcp.foundation != udp.foundation
        assert "tcptype passive" in tcp.to_sdp()
        assert conn.get_default_candidate(1) is udp
        assert conn.tcp_protocol is not None and conn.tcp_protocol is not conn.protocol
        without = await Recorder().connection()
        assert len(without.local_candidates) == 1 and without.tcp_protocol is None

    run(go())


def test_a_check_over_tcp_is_answered_over_tcp_and_becomes_its_own_pair():
    async def go():
        recorder = Recorder()
        conn = await recorder.connection(ADVERTISED_TCP)
        conn._early_checks_done = True  # as after connect(): a check forms its pair at once
        client = over_tcp(CLIENT)
        conn.datagram_received(ice_check(), client)
        answer, to = recorder.sent[0]
        assert to == client, "the answer goes back flagged for TCP"
        message = stun.parse(answer)
        assert stun.xor_mapped_address(answer, message) == CLIENT  # the plain address
        (pair,) = [p for p in conn._check_list if p.protocol is conn.tcp_protocol]
        assert pair.remote_addr == CLIENT  # aioice sees the plain address
        # The same address over UDP: another pair, on the UDP protocol.
        conn.datagram_received(ice_check(), CLIENT)
        assert {p.protocol for p in conn._check_list} == {conn.protocol, conn.tcp_protocol}
        # Nominated: the TCP client is reported selected, marked.
        pair.state = CandidatePair.State.SUCCEEDED
        pair.nominated = True
        conn.check_complete(pair)
        assert recorder.selected == [client]
        # Forgetting the UDP address leaves the TCP pair alone (and the selected one stays).
        conn.forget_address(CLIENT)
        assert [p.protocol for p in conn._check_list] == [conn.tcp_protocol]
        for p in conn._check_list:
            if p.task is not None:
                p.task.cancel()

    run(go())
