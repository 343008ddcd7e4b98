"""A session's ICE agent on the shared socket, with a recording send function and no socket."""

from __future__ import annotations

import asyncio
import secrets

import aioice
import aiortc
import pytest
from aioice.candidate import Candidate
from aioice.ice import CandidatePair

from common import stun
from tests.support.waits import run
from transceiver.call import seam
from transceiver.call.ice import SharedSocketConnection
from transceiver.call.seam import check_versions

UFRAG, PASSWORD = "ufragA", "passwordA0123456789abcdef"  # ice-chars, as the server makes
ADVERTISED = ("203.0.113.5", 3478)  # the relay's public address
CLIENT, MOVED = ("198.51.100.7", 50000), ("198.51.100.7", 50999)
Addr = tuple[str, int]


class Recorder:
    """The shared socket, as the connection sees it: a send function, and on_selected."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, Addr | None]] = []
        self.selected: list[Addr] = []

    async def connection(self, advertised_tcp: Addr | None = None) -> SharedSocketConnection:
        conn = SharedSocketConnection(
            UFRAG,
            PASSWORD,
            (ADVERTISED,),
            send=lambda data, to: self.sent.append((data, to)),
            on_selected=self.selected.append,
            advertised_tcp=advertised_tcp,
        )
        await conn.gather_candidates()
        return conn


def client_candidate(addr: Addr) -> Candidate:
    return Candidate("f", 1, "udp", 100, addr[0], addr[1], "prflx")


def pair_toward(
    conn: SharedSocketConnection, addr: Addr, state=CandidatePair.State.SUCCEEDED
) -> CandidatePair:
    """A pair in the check list, by default one whose check got its authenticated answer (what
    aioice's check_start leaves)."""
    assert conn.protocol is not None
    pair = CandidatePair(conn.protocol, client_candidate(addr))
    pair.state = state
    conn._check_list.append(pair)
    return pair


async def connected(recorder: Recorder) -> tuple[SharedSocketConnection, CandidatePair]:
    """A connection ICE completed on a pair toward CLIENT: media goes there."""
    conn = await recorder.connection()
    pair = pair_toward(conn, CLIENT)
    pair.nominated = pair.remote_nominated = True
    conn.check_complete(pair)
    return conn, pair


def test_the_only_local_candidate_is_the_relay_s_address():
    async def go():
        conn = await Recorder().connection()
        await conn.gather_candidates()  # a second gathering adds nothing
        (candidate,) = conn.local_candidates
        assert (candidate.host, candidate.port, candidate.type) == (*ADVERTISED, "host")
        assert candidate.component == 1 and candidate.transport == "udp"
        assert not conn.ice_controlling, "the controlled agent"
        assert (conn.local_username, conn.local_password) == (UFRAG, PASSWORD)

    run(go())


def test_several_relay_addresses_are_candidates_of_decreasing_priority_on_one_protocol():
    """A region's answer: its edges, then the cluster's relay; one virtual transport behind."""
    edges = [("198.51.100.10", 3478), ("198.51.100.10", 3479), ADVERTISED]

    async def go():
        recorder = Recorder()
        conn = SharedSocketConnection(
            UFRAG, PASSWORD, edges, send=lambda data, to: recorder.sent.append((data, to))
        )
        await conn.gather_candidates()
        candidates = conn.local_candidates
        assert [(c.host, c.port, c.type) for c in candidates] == [(*a, "host") for a in edges]
        priorities = [c.priority for c in candidates]
        assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == 3
        assert len({c.foundation for c in candidates}) == 3, "a dead edge freezes no backup"
        assert conn.get_default_candidate(1) is candidates[0], "the c= line: the preferred"
        assert len(conn._protocols) == 1 and conn.protocol.local_candidate is candidates[0]
        # A check forwarded by any of the relays is the same session's: answered to its source.
        check = stun.binding_request(f"{UFRAG}:cli", b"t" * 12, integrity_key=PASSWORD.encode())
        conn.datagram_received(check, CLIENT)
        ((answer, to),) = recorder.sent
        assert to == CLIENT and stun.parse(answer).msg_type == stun.BINDING_SUCCESS

    run(go())


def test_the_client_s_candidates_are_ignored_end_of_candidates_too():
    async def go():
        conn = await Recorder().connection()
        await conn.add_remote_candidate(client_candidate(CLIENT))
        await conn.add_remote_candidate(Candidate("g", 1, "udp", 100, "a-b.local", 9, "host"))
        await conn.add_remote_candidate(None)
        await conn.add_remote_candidate(None)  # aioice would raise after end-of-candidates
        assert conn.remote_candidates == [] and conn._check_list == []
        assert not conn._remote_candidates_end, "the session's deadline bounds the wait"

    run(go())


def test_a_check_is_answered_through_the_send_function_to_its_source():
    async def go():
        recorder = Recorder()
        conn = await recorder.connection()
        txid = secrets.token_bytes(12)
        check = stun.binding_request(f"{UFRAG}:cli", txid, integrity_key=PASSWORD.encode())
        conn.datagram_received(check, CLIENT)
        ((answer, to),) = recorder.sent
        assert to == CLIENT
        message = stun.parse(answer)
        assert (message.msg_type, message.transaction_id) == (stun.BINDING_SUCCESS, txid)
        assert stun.check_integrity(answer, PASSWORD.encode()), "signed with the password"
        assert stun.xor_mapped_address(answer, message) == CLIENT

    run(go())


def test_media_goes_to_aioice_s_queue_not_to_stun():
    async def go():
        recorder = Recorder()
        conn = await recorder.connection()
        conn.datagram_received(b"\x80rtp", CLIENT)
        assert conn._queue.get_nowait() == (b"\x80rtp", 1)
        assert recorder.sent == []

    run(go())


def test_a_closed_virtual_transport_sends_nothing():
    async def go():
        recorder = Recorder()
        conn = await recorder.connection()
        transport = conn.protocol.transport
        assert transport.get_extra_info("sockname") == ADVERTISED
        transport.sendto(b"\x01\x01x", CLIENT)
        transport.close()
        assert transport.is_closing()
        transport.sendto(b"\x01\x01y", CLIENT)
        assert recorder.sent == [(b"\x01\x01x", CLIENT)]

    run(go())


def test_the_first_nominated_pair_is_reported_selected():
    async def go():
        recorder = Recorder()
        conn = await recorder.connection()
        pair = pair_toward(conn, CLIENT)
        conn.check_complete(pair)
        assert recorder.selected == [], "succeeded, not nominated: nothing selected yet"
        pair.nominated = True
        conn.check_complete(pair)
        conn.check_complete(pair)
        assert recorder.selected == [CLIENT], "reported once"

    run(go())


def test_once_connected_media_moves_after_a_round_trip_and_the_old_pair_is_frozen():
    async def go():
        recorder = Recorder()
        conn, old = await connected(recorder)
        new = pair_toward(conn, MOVED)  # NAT rebinding: our check to MOVED was answered
        conn.check_complete(new)
        assert conn._nominated[1] is new and new.nominated
        assert not old.nominated and not old.remote_nominated
        assert old.state == CandidatePair.State.FROZEN, "back only after a new round trip"
        assert recorder.selected == [CLIENT, MOVED]

    run(go())


def test_a_pair_without_a_round_trip_or_at_the_same_address_moves_nothing():
    async def go():
        recorder = Recorder()
        conn, current = await connected(recorder)
        failed = pair_toward(conn, MOVED, CandidatePair.State.FAILED)
        conn.check_complete(failed)
        assert conn._nominated[1] is current and not failed.nominated
        again = pair_toward(conn, CLIENT)  # another pair toward the current address
        conn.check_complete(again)
        assert conn._nominated[1] is current
        assert current.state == CandidatePair.State.SUCCEEDED
        assert recorder.selected == [CLIENT]

    run(go())


def test_forget_address_drops_its_pairs_and_candidate_but_never_the_selected_one():
    async def go():
        recorder = Recorder()
        conn, current = await connected(recorder)
        left = pair_toward(conn, MOVED, CandidatePair.State.IN_PROGRESS)
        left.task = asyncio.get_running_loop().create_task(asyncio.sleep(60))
        conn._remote_candidates += [current.remote_candidate, left.remote_candidate]
        conn.forget_address(MOVED)
        await asyncio.sleep(0)
        assert left.task.cancelled(), "its check stops"
        assert conn._check_list == [current]
        assert [(c.host, c.port) for c in conn.remote_candidates] == [CLIENT]
        conn.forget_address(CLIENT)
        assert conn._check_list == [current], "media's own address stays"
        assert len(conn.remote_candidates) == 1

    run(go())


@pytest.mark.parametrize("module", [aiortc, aioice])
def test_an_unverified_aiortc_or_aioice_fails_at_start(module, monkeypatch):
    check_versions()  # the installed ones are verified
    name = module.__name__
    low, high = seam.VERIFIED_AIORTC if name == "aiortc" else seam.VERIFIED_AIOICE
    for version in (f"{high[0]}.{high[1] + 1}.0", f"{low[0]}.{low[1] - 1}.9"):
        monkeypatch.setattr(module, "__version__", version)
        with pytest.raises(RuntimeError, match=f"{name} {version} is outside the verified range"):
            check_versions()
    monkeypatch.setattr(module, "__version__", f"{low[0]}.{low[1]}.0")
    check_versions()


# -- ICE connected as soon as the check list completes (PromptConnection) --------------------------
CLIENT_UFRAG, CLIENT_PASSWORD = "cliU", "clientpassword0123456789"


def client_check(nominate: bool) -> bytes:
    """The client's (controlling) authenticated check, with USE-CANDIDATE if ``nominate``."""
    check = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
    check.attributes["USERNAME"] = f"{UFRAG}:{CLIENT_UFRAG}"
    check.attributes["PRIORITY"] = 1853824767
    check.attributes["ICE-CONTROLLING"] = 1
    if nominate:
        check.attributes["USE-CANDIDATE"] = None
    check.add_message_integrity(PASSWORD.encode())
    check.add_fingerprint()
    return bytes(check)


def answer_to(request: bytes, addr: Addr, password: str = CLIENT_PASSWORD) -> bytes:
    """The client's success response to our check ``request``, signed with ``password``."""
    message = aioice.stun.parse_message(request)
    response = aioice.stun.Message(
        aioice.stun.Method.BINDING, aioice.stun.Class.RESPONSE, message.transaction_id
    )
    response.attributes["XOR-MAPPED-ADDRESS"] = addr
    response.add_message_integrity(password.encode())
    response.add_fingerprint()
    return bytes(response)


async def connecting(recorder: Recorder) -> tuple[SharedSocketConnection, asyncio.Task[None]]:
    """A connection whose connect() runs, as aiortc starts it once the answer is set."""
    conn = await recorder.connection()
    conn.remote_username, conn.remote_password = CLIENT_UFRAG, CLIENT_PASSWORD
    task = asyncio.get_running_loop().create_task(conn.connect())
    await asyncio.sleep(0)  # connect() runs up to its first wait
    return conn, task


async def settle() -> None:
    """A few turns of the event loop and nothing else: no timer of aioice's can come due."""
    for _ in range(5):
        await asyncio.sleep(0)


def our_checks(recorder: Recorder) -> list[tuple[bytes, Addr | None]]:
    return [
        (data, to)
        for data, to in recorder.sent
        if aioice.stun.parse_message(data).message_class == aioice.stun.Class.REQUEST
    ]


def test_the_nominating_check_on_a_proven_pair_connects_without_waiting_for_a_tick():
    """RFC 8445 7.3.1.5: our triggered check proved the round trip, then the client's
    USE-CANDIDATE check completes ICE at once, not at aioice's next 20 ms check tick."""

    async def go():
        recorder = Recorder()
        conn, task = await connecting(recorder)
        conn.datagram_received(client_check(nominate=False), CLIENT)  # checks, nominates later
        await settle()
        ((check, to),) = our_checks(recorder)  # the triggered check, at once
        assert to == CLIENT
        conn.datagram_received(answer_to(check, CLIENT), CLIENT)
        await settle()
        assert not task.done(), "a proven pair, not nominated yet"
        conn.datagram_received(client_check(nominate=True), CLIENT)
        await settle()
        assert task.done() and task.exception() is None, "connected on the nominating check"
        assert recorder.selected == [CLIENT]
        assert not conn._checks_loop.done(), "aioice's loop was still sleeping out its tick"
        await conn.close()
        assert conn._checks_loop.done(), "and is stopped with the connection"

    run(go())


def test_an_incoming_nominating_check_alone_connects_nothing():
    """A USE-CANDIDATE check, maybe a replayed capture: ICE completes only once our own check
    to its source is answered with the client's credentials."""

    async def go():
        recorder = Recorder()
        conn, task = await connecting(recorder)
        conn.datagram_received(client_check(nominate=True), CLIENT)
        conn.datagram_received(client_check(nominate=True), CLIENT)
        await settle()
        assert not task.done() and recorder.selected == []
        ((check, _),) = our_checks(recorder)
        # An answer from someone who does not know the client's password is discarded.
        conn.datagram_received(answer_to(check, CLIENT, "not-the-client-s-password"), CLIENT)
        await settle()
        assert not task.done() and recorder.selected == []
        conn.datagram_received(answer_to(check, CLIENT), CLIENT)
        await settle()
        assert task.done() and task.exception() is None
        assert recorder.selected == [CLIENT]
        await conn.close()

    run(go())


def test_closing_before_completion_fails_connect_as_aioice_does():
    async def go():
        conn, task = await connecting(Recorder())
        await conn.close()
        with pytest.raises(ConnectionError):
            await task

    run(go())


def test_prompt_turns_a_plain_aioice_connection_into_one_that_connects_at_completion():
    plain = aioice.Connection(ice_controlling=True)
    seam.prompt(plain)
    assert isinstance(plain, seam.PromptConnection) and plain._completed is None
    with pytest.raises(TypeError):
        seam.prompt(plain)  # already one
