"""What the realtime browser call showed, in numbers: when the page heard the agent's answer start
and stop, against the events it got, and what the agent was told it had heard.

Sans-I/O: the harness's report (``realtime_harness``: the page's events with their arrival
times, the audio tap) and the agent's event log (``--log-events``) in, figures out. Every time
is in ms on the page's ``performance.now()`` clock unless its name says otherwise.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# -50 dBFS: below it a render quantum is silence. Opus-decoded zeros are ~0, but a cut in the
# middle of a word rings on in the decoder for a frame at up to ~-48 dBFS, falling fast: with a
# -60 dBFS floor that ring counted as ~20 ms more of the item heard than it was sent.
QUIET_RMS = 3e-3
STOPPED_MS = 300  # quiet this long: the answer stopped (espeak-ng's pauses inside one are shorter)


@dataclass(frozen=True)
class Quantum:
    """One render quantum the tap heard: [start, end) on the page's clock, and its RMS."""

    start: float
    end: float
    rms: float

    @property
    def loud(self) -> bool:
        return self.rms >= QUIET_RMS


def heard(tap: Mapping[str, Any]) -> list[Quantum]:
    """The tap's quanta on the page's clock.

    The worklet reports audio-clock frames; the page stamps each post on arrival. A post can only
    arrive after its last quantum was rendered, so the smallest (arrival - render time) over all
    posts is the clocks' offset, give or take the quickest delivery (about a millisecond).
    """
    rate = float(tap["rate"])
    offset = min(arrived - frame * 1000 / rate for frame, arrived in tap["posts"])
    quanta: list[Quantum] = []
    previous_end: float | None = None
    for end_frame, rms in tap["quanta"]:
        end = end_frame * 1000 / rate + offset
        start = previous_end if previous_end is not None else end - 128 * 1000 / rate
        quanta.append(Quantum(start, end, float(rms)))
        previous_end = end
    return quanta


def first(events: Iterable[Mapping[str, Any]], kind: str, after: float = -math.inf) -> Any:
    """The first event of type ``kind`` that arrived after ``after``, or None."""
    return next((e for e in events if e.get("type") == kind and e["t"] > after), None)


@dataclass
class Answer:
    """The answer the second utterance interrupted, as the page heard it."""

    response_id: str | None = None
    item_id: str | None = None
    created_at: float | None = None  # response.created arrived
    onset: float | None = None  # its first loud quantum began
    barge_in_at: float | None = None  # the agent's speech_started over it arrived
    stop: float | None = None  # its last loud quantum ended (a quiet run >= STOPPED_MS follows)
    loud_ms: float = 0.0  # loud quanta between onset and stop
    rms: float = 0.0  # of those quanta
    done: Mapping[str, Any] | None = None  # its response.done
    notes: list[str] = field(default_factory=list)  # why a figure is missing

    @property
    def stop_after_barge_in_ms(self) -> float | None:
        """From the page getting speech_started to the page hearing the answer end."""
        if self.stop is None or self.barge_in_at is None:
            return None
        return self.stop - self.barge_in_at

    @property
    def heard_ms(self) -> float | None:
        """How much of the item's audio the page heard: its onset to its stop."""
        if self.stop is None or self.onset is None:
            return None
        return self.stop - self.onset


def answer(events: Sequence[Mapping[str, Any]], quanta: Sequence[Quantum]) -> Answer:
    """The first answer and how it ended: the barge-in is the first speech_started after it
    began; the stop, the start of the first quiet run of ``STOPPED_MS`` ending after it."""
    out = Answer()
    created = first(events, "response.created")
    if created is None:
        out.notes.append("no response.created: the agent never answered")
        return out
    out.created_at = created["t"]
    out.response_id = (created.get("response") or {}).get("id")
    delta = next((e for e in events if e.get("response_id") == out.response_id
                  and "item_id" in e), None)  # fmt: skip
    out.item_id = delta["item_id"] if delta else None
    out.done = next((e for e in events if e.get("type") == "response.done"
                     and (e.get("response") or {}).get("id") == out.response_id), None)  # fmt: skip
    barge_in = first(events, "input_audio_buffer.speech_started", out.created_at)
    out.barge_in_at = barge_in["t"] if barge_in else None
    after = [q for q in quanta if q.start >= out.created_at]
    start = next((i for i, q in enumerate(after) if q.loud), None)
    if start is None:
        out.notes.append("the page heard no audio after response.created")
        return out
    out.onset = after[start].start
    if out.barge_in_at is None:
        out.notes.append("no speech_started after the answer began: nothing interrupted it")
        return out
    if out.barge_in_at < out.onset:
        out.notes.append(
            f"the second sentence began {out.onset - out.barge_in_at:.0f} ms before the page "
            "heard the answer: the agent took longer to answer than the microphone's gap"
        )
    stop = quiet_run_ending_after(after[start:], out.barge_in_at)
    if stop is None:
        out.notes.append(f"the answer never fell quiet for {STOPPED_MS} ms after the barge-in")
        return out
    out.stop = stop
    loud = [q for q in after[start:] if q.loud and q.end <= stop]
    out.loud_ms = sum(q.end - q.start for q in loud)
    out.rms = math.sqrt(sum(q.rms**2 for q in loud) / len(loud)) if loud else 0.0
    return out


def quiet_run_ending_after(quanta: Sequence[Quantum], moment: float) -> float | None:
    """Where the first run of quiet quanta lasting ``STOPPED_MS`` and ending after ``moment``
    begins (the end of the loud audio before it), or None."""
    run_start: float | None = None
    for q in quanta:
        if q.loud:
            run_start = None
            continue
        if run_start is None:
            run_start = q.start
        if q.end - run_start >= STOPPED_MS and q.end > moment:
            return run_start
    return None


def logged(lines: Iterable[Mapping[str, Any]], direction: str, kind: str) -> list[Mapping]:
    """The agent's ``--log-events`` lines of one direction ("in": it received) and type."""
    return [x for x in lines if x.get("dir") == direction and x.get("type") == kind]


def quantum_ms(tap: Mapping[str, Any]) -> float:
    """How long one render quantum of the tap lasts (its time resolution)."""
    return 128 * 1000 / float(tap["rate"])


def receive_path(call: Mapping[str, Any], answer: Answer) -> dict[str, float]:
    """Where the time between the agent's speech_started and the page's silence went, ms.

    The agent's clock and the page's are both this machine's wall clock (the page's
    ``timeOrigin``); the page's jitter buffer is read from its inbound-rtp counters over the
    ``WINDOW_MS`` before the barge-in; the packets are those the harness's receive transform saw.
    """
    out: dict[str, float] = {}
    if answer.barge_in_at is None:
        return out
    out |= agent_side(call, answer.barge_in_at)
    out |= jitter_buffer(call.get("neteq") or [], answer.barge_in_at)
    out |= silence_lag(call.get("packets") or {}, call.get("time_origin_ms"))
    return out


WINDOW_MS = 200


def agent_side(call: Mapping[str, Any], barge_in_at: float) -> dict[str, float]:
    """speech_started from the agent to the page, and the agent's wait for the truncate."""
    origin = call.get("time_origin_ms")
    lines = call.get("agent_log") or []
    started = logged(lines, "out", "input_audio_buffer.speech_started")
    if origin is None or not started:
        return {}
    sent = min(started, key=lambda x: abs(x["t"] * 1000 - origin - barge_in_at))["t"] * 1000
    out = {"speech_started agent -> page": origin + barge_in_at - sent}
    truncates = logged(lines, "in", "conversation.item.truncate")
    if truncates:
        out["speech_started -> truncate, at the agent"] = truncates[0]["t"] * 1000 - sent
    return out


def jitter_buffer(samples: Sequence[Mapping[str, Any]], moment: float) -> dict[str, float]:
    """The page's jitter buffer over the ``WINDOW_MS`` before ``moment``: the mean delay of the
    samples it emitted, its target, and the audio it had concealed by then (late packets)."""
    if not samples:
        return {}
    first = min(samples, key=lambda x: abs(x["t"] - (moment - WINDOW_MS)))
    last = min(samples, key=lambda x: abs(x["t"] - moment))
    emitted = last["jitterBufferEmittedCount"] - first["jitterBufferEmittedCount"]
    if emitted <= 0:
        return {}
    per_sample = 1000 / emitted
    return {
        "page jitter buffer": (last["jitterBufferDelay"] - first["jitterBufferDelay"]) * per_sample,
        "its target": (last["jitterBufferTargetDelay"] - first["jitterBufferTargetDelay"])
        * per_sample,
        "concealed by then": last["concealedSamples"] / 48,  # 48 kHz samples, in ms
    }


@dataclass(frozen=True)
class Packet:
    """One RTP packet the page's receiver got: arrival (page clock), RTP timestamp, size."""

    arrived: float
    timestamp: int
    size: int


def received(packets: Mapping[str, Any], origin: float | None) -> list[Packet]:
    """The receive transform's packets on the page's clock (its worker has a clock of its own:
    both are offsets from a ``timeOrigin``)."""
    rows = packets.get("rows") or []
    if origin is None or packets.get("origin") is None:
        return []
    shift = packets["origin"] - origin
    return [Packet(t + shift, timestamp, size) for t, timestamp, size in rows]


def silence_size(packets: Sequence[Packet]) -> int | None:
    """The size of the transceiver's silence packet (one cached packet): the commonest."""
    return Counter(p.size for p in packets).most_common(1)[0][0] if packets else None


def last_packet_of(packets: Sequence[Packet], answer: Answer, audio_end_ms: int) -> Packet | None:
    """The packet carrying the last ``audio_end_ms`` of the answer's item: the item begins with
    the first packet that is not silence after response.created (its first word starts at
    once), and runs on the RTP clock (48 kHz) from there."""
    silent = silence_size(packets)
    if answer.created_at is None or silent is None:
        return None
    first_loud = next(
        (p for p in packets if p.arrived > answer.created_at and p.size != silent), None
    )
    if first_loud is None:
        return None
    end = first_loud.timestamp + audio_end_ms * 48
    inside = [p for p in packets if first_loud.timestamp <= p.timestamp < end]
    return max(inside, key=lambda p: p.timestamp) if inside else None


def silence_lag(packets: Mapping[str, Any], origin: float | None) -> dict[str, float]:
    """How much later, against their RTP timestamps, the transceiver's silence packets arrive
    than its audio: the step the page's jitter buffer sees at each start and end of an answer.
    Silence is the most common packet size (one cached packet); audio, the larger ones."""
    rows = received(packets, origin)
    silent = silence_size(rows)
    quiet = [p.arrived - p.timestamp / 48 for p in rows if p.size == silent]
    loud = [p.arrived - p.timestamp / 48 for p in rows if silent and p.size > silent + 20]
    if not quiet or not loud:
        return {}
    return {"silence packets behind audio": statistics.median(quiet) - statistics.median(loud)}
