"""The one seam to aiortc and aioice: every private attribute, class swap and patch of theirs.

Nothing else in product code touches their internals (``tests/transceiver/test_aiortc_seam.py``
checks it; outside this package aiortc and aioice are used only through the names they export,
and the three unexported helpers named at the end; ``lint-imports`` keeps aioice here).
``check()`` runs once at start (``TransceiverServer``): the versions, then every method and
attribute below, read from throwaway objects, so that an aiortc or aioice that moved one fails
there, naming it, and not in a call. Each swap checks its own instance again before it acts (a
refusal there fails that POST with a 500). An upgrade of aiortc or aioice means reading this
table, then the modules it names. A package rather than one module because the SCTP transport
alone (``sctp``) is over 300 lines; the table is here only.

Verified: aiortc 1.9-1.16, aioice 0.9-0.13 (``VERIFIED_AIORTC``, ``VERIFIED_AIOICE``).

What it touches, where (class), why, and what breaks if it changes:

1. ``ice.PromptConnection``: aioice ``Connection.connect``/``close`` wrapped,
   ``_check_list_maybe_complete`` overridden; a stock agent turned into one by ``__class__``
   (``prompt``, ``prompt_ice``: the benchmarks' callers).
   Why: ICE counts as connected when its check list completes, not at aioice's next 20 ms tick.
   Breaks: if aioice stops calling ``_check_list_maybe_complete``, ICE connects at aioice's pace
   (up to 20 ms later, still correct); if its ``close`` changes, a completed agent's loop may
   start consent checks on a closed connection.
2. ``ice.RelayAgent.gather_candidates``: aioice ``Connection._local_candidates_start``,
   ``_local_candidates``, ``_local_candidates_end`` set.
   Why: no interface enumeration or STUN servers; the only candidates are the relays'.
   Breaks: the answer names the machine's own addresses, which a client must never be sent to.
3. ``ice.RelayAgent.add_protocol``: aioice ``StunProtocol(connection)``, its
   ``connection_made`` and ``local_candidate``; ``Connection._protocols`` appended.
   Why: aioice's own STUN handling (parse, answer, retransmit) over our virtual transport on the
   shared socket, one protocol per transport (UDP, and ICE-TCP).
   Breaks: checks are not answered or not paired: every call fails ICE.
4. ``ice.RelayAgent.nominated_pair``/``use_pair``: aioice ``Connection._nominated`` read and
   set; ``CandidatePair.state``/``nominated``/``remote_nominated`` (public) set.
   Why: media moves to a client's new address only after our check's round trip to it (NAT
   rebinding, ``transceiver.call.ice.SharedSocketConnection.check_complete``).
   Breaks: media and consent stay on a dead address until consent expires (~30 s).
5. ``ice.RelayAgent.pairs``/``drop_pairs``/``drop_remote_candidates``: aioice
   ``Connection._check_list`` read and shortened, ``_remote_candidates`` filtered.
   Why: aioice's lists stay as small as the demultiplexer's table (a client cycling addresses).
   Breaks: memory and check work grow with every address a client ever used.
6. ``ice.install_ice``: aiortc ``RTCIceGatherer._connection``, ``RTCIceTransport._connection``,
   ``_recv``, ``_send`` set.
   Why: the session's agent on the shared socket instead of aiortc's, which binds sockets.
   Breaks: each offer fails (500), or aiortc's own agent binds and gathers.
7. ``ice.send_on_nominated_pair``/``divert_rtp`` (the benchmarks' callers only): aiortc
   ``RTCIceTransport._connection``, aioice ``Connection._nominated`` read,
   ``Connection.data_received`` wrapped on the instance.
   Why: a light caller's RTP leaves and arrives without aiortc's per-packet tasks.
   Breaks: the sessions benchmark's light callers; not the transceiver.
8. ``receiver.InlineAudioReceiver``: aiortc ``RTCRtpReceiver`` turned into it by ``__class__``
   (``install_receiver``); ``receive``, ``stop``, ``_handle_rtp_packet`` replaced, ``_run_rtcp``
   started; ``__codecs``, ``__remote_streams``, ``__started``, ``__rtcp_task``,
   ``__rtcp_started``, ``__rtcp_exited``, ``__transport`` (name-mangled) and ``_enabled`` read
   or set, ``__decoder_thread`` left unset; ``StreamStatistics`` fed;
   ``RTCDtlsTransport._register_rtp_receiver`` called.
   Why: inbound audio without aiortc's decoder thread, on the event loop
   (``transceiver.call.inbound``), with aiortc's RTCP receiver reports kept; a ``stop`` that
   never waits on an RTCP task that died.
   Breaks: ``install_receiver`` refuses (each offer fails); a changed meaning of a
   statistic makes the receiver reports (loss, jitter, RTT) wrong.
9. ``receiver.latch_srtp``: aiortc ``RTCDtlsTransport._rx_srtp`` replaced by a
   ``transceiver.call.inbound.LatchedSrtp`` around it, and read by ``direct_rtp``.
   Why: every SRTP/SRTCP packet of a call passes its SSRC latch before libsrtp sees it; the
   direct path unprotects with the call's own session (one replay window).
   Breaks: foreign SSRCs reach libsrtp and aiortc (issue 21: a stream and a report block each).
10. ``receiver.install_jitter_buffer`` (the benchmarks' callers only): aiortc
    ``RTCRtpReceiver.__jitter_buffer`` replaced by a ``StockReceiverBuffer``, which answers
    aiortc's ``JitterBuffer.add`` with a ``JitterFrame`` of ``RtpPacket._data``.
    Why: the callers hear the echo with our jitter buffer's latency, not aiortc's (#543).
    Breaks: the callers' echo figures; not the transceiver.
11. ``sender.InlineAudioSender``/``DirectSender``: aiortc ``RTCRtpSender`` turned into it by
    ``__class__`` (``install_sender``); ``_run_rtp`` replaced; ``__rtp_started``,
    ``__rtp_exited`` set; ``_ssrc``, ``__mid``, ``__rtp_header_extensions_map`` read;
    ``__packet_count``, ``__octet_count``, ``__rtp_timestamp``, ``__ntp_timestamp`` written per
    packet; ``RTCDtlsTransport._tx_srtp.protect`` and ``_state`` read; ``RtpPacket`` serializes
    the header template.
    Why: one 20 ms clock per process sends every call's RTP (``transceiver.call.outbound``),
    not a task per call; aiortc's RTCP Sender Reports carry what was sent.
    Breaks: ``install_sender`` refuses (each offer fails); Sender Reports go wrong (the
    caller's RTT and sync); a changed ``_state`` meaning sends nothing or sends before DTLS.
12. ``sctp.BoundedSctpTransport``: aiortc ``RTCSctpTransport`` turned into it by ``__class__``
    (``install_sctp``); ``_receive_data_chunk``, ``_receive_forward_tsn_chunk``, ``_send_sack``,
    ``_get_inbound_stream``, ``getCapabilities`` replaced, ``_receive_sack_chunk``,
    ``_receive``, ``_data_channel_send`` wrapped, ``_reset_deferred_streams`` and
    ``_send_chunk`` called; ``_last_received_tsn``, ``_sack_duplicates``, ``_sack_misordered``
    (left empty), ``_sack_needed``, ``_advertised_rwnd``, ``_inbound_streams``,
    ``_inbound_streams_max``, ``_inbound_streams_count``, ``_sent_queue`` (its chunks' ``tsn``,
    ``_book_size``, ``protocol``), ``_last_sacked_tsn``, ``_local_tsn``,
    ``_remote_max_message_size``; ``InboundStream`` subclassed (``reassembly``,
    ``sequence_number``, ``add_chunk``, ``pop_messages``, ``prune_chunks``); ``SackChunk``,
    ``RTCSctpCapabilities``, ``WEBRTC_DCEP``, ``aiortc.utils``' serial-number helpers.
    Why: the data channel bounded per call (``transceiver.call.sctp``: window, gaps, backlog).
    Breaks: ``install_sctp`` refuses (each offer fails); a changed chunk flow leaves a
    caller's SCTP unbounded again (issue 21: CPU and memory per call without limit).
13. ``peer.use_certificate``: aiortc ``RTCPeerConnection.__certificates`` set;
    ``peer.peer_connection``: the name ``RTCCertificate`` of ``aiortc.rtcpeerconnection``
    swapped for the length of one ``RTCPeerConnection()`` (it never awaits), then put back.
    Why: one DTLS certificate per process (``transceiver.call.certificate``), and no key pair
    and certificate made per call only to be thrown away (~0.1 ms of each connect's CPU).
    Breaks: ``use_certificate`` or ``peer_connection`` refuses (each offer fails).
14. ``peer.SharedCertificate``: aiortc ``RTCCertificate._create_ssl_context`` and
    ``getFingerprints`` overridden.
    Why: fingerprints and OpenSSL context made once per certificate, not per call; no session
    cache shared between calls; ECDHE-RSA suites beside aiortc's ECDHE-ECDSA ones
    (``peer.DTLS_CIPHERS``), so that a peer with an RSA certificate can be the DTLS server.
    Breaks: every DTLS transport builds its context again (slower connects), the answer's
    fingerprint is not the one DTLS presents (every call fails DTLS), or (aiortc's list again)
    every call to a DTLS server with an RSA certificate (GStreamer) fails: "no shared cipher".
15. ``peer.track_connect``: aiortc ``RTCPeerConnection.__connect`` (checked by its qualified
    name) replaced on the instance by a function that starts it as a task and keeps that task
    (aiortc's ``asyncio.ensure_future`` of it returns the task as it is).
    Why: a session ended while aiortc connects waits for that task, then stops what it started;
    kept when started, not found among every task of the loop (a scan per answer).
    Breaks: ``track_connect`` refuses (each offer fails); if aiortc stops starting it through
    ``self.__connect()``, no task is kept: that teardown stops early and the RTCP tasks aiortc
    started afterwards leak.

Unexported names used outside this package, which hold no state of aiortc's or aioice's:
``aiortc.sdp`` (``transceiver.signaling.offer`` checks an offer with aiortc's own parser),
``aiortc.utils.uint32_gt`` (``transceiver.call.sctp``), ``aioice.stun.parse_message``
(``transceiver.socket.classify``: a datagram aioice's parser refuses never reaches an agent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import aioice
import aiortc
from aiortc import RTCDtlsTransport, RTCIceGatherer, RTCIceTransport

from transceiver.call.seam.ice import (
    Candidate,
    CandidatePair,
    PromptConnection,
    RelayAgent,
    StunProtocol,
    candidate_foundation,
    candidate_priority,
    check_ice,
    divert_rtp,
    install_ice,
    prompt,
    prompt_ice,
    send_on_nominated_pair,
)
from transceiver.call.seam.peer import (
    SharedCertificate,
    check_peer,
    peer_connection,
    track_connect,
    use_certificate,
)
from transceiver.call.seam.receiver import (
    InlineAudioReceiver,
    StockReceiverBuffer,
    check_receiver,
    install_jitter_buffer,
    install_receiver,
    latch_srtp,
)
from transceiver.call.seam.sctp import BoundedSctpTransport, check_sctp, install_sctp
from transceiver.call.seam.sender import (
    DirectSender,
    InlineAudioSender,
    check_sender,
    install_sender,
)

__all__ = [
    "VERIFIED_AIOICE",
    "VERIFIED_AIORTC",
    "BoundedSctpTransport",
    "Candidate",
    "CandidatePair",
    "DirectSender",
    "InlineAudioReceiver",
    "InlineAudioSender",
    "PromptConnection",
    "RelayAgent",
    "SharedCertificate",
    "StockReceiverBuffer",
    "StunProtocol",
    "candidate_foundation",
    "candidate_priority",
    "check",
    "check_versions",
    "divert_rtp",
    "install_ice",
    "install_jitter_buffer",
    "install_receiver",
    "install_sctp",
    "install_sender",
    "latch_srtp",
    "peer_connection",
    "prompt",
    "prompt_ice",
    "send_on_nominated_pair",
    "track_connect",
    "use_certificate",
]

VERIFIED_AIORTC = ((1, 9), (1, 16))
VERIFIED_AIOICE = ((0, 9), (0, 13))

T = TypeVar("T")


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def check_versions() -> None:
    """Fail at start, with a clear message, on an aiortc/aioice this seam was not verified with."""
    for name, module, (low, high) in (
        ("aiortc", aiortc, VERIFIED_AIORTC),
        ("aioice", aioice, VERIFIED_AIOICE),
    ):
        version = _version(module.__version__)
        if not low <= version <= high:
            raise RuntimeError(
                f"{name} {module.__version__} is outside the verified range "
                f"{'.'.join(map(str, low))}..{'.'.join(map(str, high))}"
            )


def check() -> None:
    """Fail at start, naming what is missing, on an aiortc/aioice outside the verified versions
    or without one of the internals the table lists."""
    check_versions()
    missing = _in_a_loop(_missing)
    if missing:
        raise RuntimeError(
            f"aiortc {aiortc.__version__} / aioice {aioice.__version__} has no "
            f"{', '.join(missing)} where transceiver.call.seam expects it; not supported"
        )


def _missing() -> list[str]:
    """Every internal of the table that throwaway objects lack (aiortc's constructors take the
    running event loop)."""
    gatherer = RTCIceGatherer(iceServers=[])
    ice = RTCIceTransport(gatherer)
    missing = check_ice()
    missing += [f"RTCIceGatherer.{a}" for a in ("_connection",) if not hasattr(gatherer, a)]
    missing += [
        f"RTCIceTransport.{a}" for a in ("_connection", "_recv", "_send") if not hasattr(ice, a)
    ]
    dtls = RTCDtlsTransport(ice, [SharedCertificate.generateCertificate()])
    missing += [
        f"RTCDtlsTransport.{a}"
        for a in ("_rx_srtp", "_tx_srtp", "_state", "_register_rtp_receiver")
        if not hasattr(dtls, a)
    ]
    missing += check_receiver(dtls) + check_sender(dtls) + check_sctp(dtls) + check_peer()
    return missing


def _in_a_loop(make: Callable[[], T]) -> T:
    """``make()`` inside the running event loop, or outside one in a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return make()

    async def run() -> T:
        return make()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()
