"""The backends benchmark's latency, from timestamps taken at both ends, sans I/O.

Written for the realtime backend and its example agent; the other backends' stand-ins
(``testbed.backend_standins``) log their audio messages in the agent's shape (type ``audio``),
so the same pairing serves them ("append" and "delta" below: the audio message up and down).

Each direction is timed between a marker's two sightings, both on the machine's wall clock:

- uplink (a): a caller sends a beep a second (``testbed.callers.beep_packets``); the packet
  that carries its first sound after silence is marked when it is sent (``OpusToneTrack.marks``:
  the caller's clocked sender takes it and sends it within microseconds). The example agent logs
  every ``input_audio_buffer.append`` it reads, with the time its WebSocket handed the message
  over and the audio's peak (``--log-events``): the first append with sound after silent ones
  carries that packet. Uplink = agent read - caller sent.
- downlink (b): the agent's ``beep`` stand-in answers every second with a beep after silence;
  its log has the time just before the first delta with sound was written to its WebSocket.
  The caller decodes what it receives and notes when the first packet with sound after silence
  was handed to it (``EchoCounter.onsets``). Downlink = caller received - agent sent.
- the echo reference: a caller's own beep through an echo transceiver, sent -> heard back
  (both directions, no WebSocket).

Each start is paired with the first end within ``MATCH_WINDOW_S`` (markers are a second
apart); a start with none is counted as unmatched, never guessed. A call is paired with its
agent session by the first event on its data channel (``session.created``, whose
``event_<session>_<n>`` id names it).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.harness.stats import percentile
from testbed.callers import AUDIBLE_PEAK

MATCH_WINDOW_S = 0.5
TICK_GAP_S = 0.0015  # packets of one tick leave closer together than this
C2R, R2T, T2R, R2C = "caller->relay", "relay->transceiver", "transceiver->relay", "relay->caller"
PERIOD_S = 1.0  # of both ends' beeps (BEEP_LEVELS' loop; the agent's BEEP_PERIOD_S)
FRAME_MS = 20.0
ON_TICK_MS = 0.5  # a downlink onset followed by its next packet 20 +- this: it left on a tick
APPEND = "input_audio_buffer.append"
DELTA = "response.output_audio.delta"
AUDIO = "audio"  # the stand-in backends' lines (testbed.backend_standins), both directions


@dataclass
class AgentCall:
    """What the agent's log says of one session: when sound started after silence in what it
    read (``heard``) and in what it sent (``said``)."""

    heard: list[float] = field(default_factory=list)
    said: list[float] = field(default_factory=list)
    appends: int = 0
    deltas: int = 0
    _heard_loud: bool = True  # the previous append had sound (so the first one is no onset)
    _said_loud: bool = False

    def line(self, event: dict[str, Any]) -> None:
        kind, t = event.get("type"), event.get("t")
        if not isinstance(t, float | int):
            return
        if kind in (APPEND, AUDIO) and event.get("dir") == "in":
            self.appends += 1
            loud = event.get("audio_peak", 0) >= AUDIBLE_PEAK
            if loud and not self._heard_loud:
                self.heard.append(float(t))
            self._heard_loud = loud
        elif kind in (DELTA, AUDIO) and event.get("dir") == "out":
            self.deltas += 1
            loud = event.get(f"{'delta' if kind == DELTA else 'audio'}_peak", 0) >= AUDIBLE_PEAK
            if loud and not self._said_loud:
                self.said.append(float(t))
            self._said_loud = loud


def agent_calls(lines: Iterable[dict[str, Any]]) -> dict[str, AgentCall]:
    """The agent's sessions by their tag, from its ``--log-events`` lines in order."""
    calls: dict[str, AgentCall] = {}
    for event in lines:
        tag = event.get("call")
        if isinstance(tag, str):
            calls.setdefault(tag, AgentCall()).line(event)
    return calls


def session_tag(first_event_id: str | None) -> str | None:
    """``event_<tag>_<n>`` (the agent's event ids) -> ``tag``."""
    parts = (first_event_id or "").split("_")
    return parts[1] if len(parts) == 3 and parts[0] == "event" else None


def pair(starts: Sequence[float], ends: Sequence[float]) -> tuple[list[tuple[float, float]], int]:
    """Each start with the first end after it within ``MATCH_WINDOW_S``, each end used once:
    the (start, end) pairs, and how many starts found none."""
    ends = sorted(ends)
    pairs: list[tuple[float, float]] = []
    unmatched = 0
    used = -1
    for start in sorted(starts):
        i = max(bisect.bisect_left(ends, start), used + 1)
        if i < len(ends) and ends[i] - start < MATCH_WINDOW_S:
            pairs.append((start, ends[i]))
            used = i
        else:
            unmatched += 1
    return pairs, unmatched


def delays_ms(pairs: list[tuple[float, float]]) -> list[float]:
    return [1000 * (end - start) for start, end in pairs]


def within(times: Iterable[float], window: tuple[float, float]) -> list[float]:
    return [t for t in times if window[0] <= t <= window[1]]


def grid_lateness(times: Sequence[float], period_s: float = PERIOD_S) -> list[float]:
    """How late each of events meant to be ``period_s`` apart came, against the earliest: a
    process's timer lateness (s) from the times its timer fired (whatever the phase of its
    grid, which a caller's clock moves after a stall)."""
    if not times:
        return []
    first = times[0]
    offsets = [t - (first + round((t - first) / period_s) * period_s) for t in times]
    least = min(offsets)
    return [o - least for o in offsets]


def realtime_call(
    timings: dict[str, Any],
    agent: AgentCall | None,
    window: tuple[float, float],
    wire: Wire | None = None,
    session: str | None = None,
) -> dict[str, Any]:
    """One backend call's delays over ``window`` (wall times): uplink and downlink end to end,
    and, with ``wire`` (the loopback capture), each one's stages: the part in the transceiver
    (socket in -> socket out), the relay's hop, the measuring ends' own; the caller's and the
    agent's timer lateness. ``session``: the call's name in the backend's log and on the wire
    (default: the Realtime agent's, from the call's first event)."""
    marks = [m for m in timings["marks"] if window[0] <= m[0] <= window[1]]
    out: dict[str, Any] = {
        "id": timings["id"],
        "session": session or session_tag(timings.get("first_event_id")),
        "caller_late_ms": [1000 * x for x in grid_lateness([m[0] for m in marks])],
    }
    if agent is None:
        out["error"] = "no agent session named by its first event"
        return out
    up, up_missed = pair([m[0] for m in marks], agent.heard)
    said = within(agent.said, window)
    onsets = {o[0]: o for o in timings["onsets"]}
    down, down_missed = pair(said, list(onsets))
    out.update(
        uplink_ms=delays_ms(up),
        downlink_ms=delays_ms(down),
        downlink_on_tick=[on_tick(heard, onsets[heard][2]) for _, heard in down],
        unmatched={"uplink": up_missed, "downlink": down_missed},
        agent_late_ms=[1000 * x for x in grid_lateness(said)],
        appends=agent.appends,
        deltas=agent.deltas,
    )
    if wire is not None and out["session"] in wire.sessions:
        out.update(uplink_stages(timings, marks, agent, wire, out["session"]))
        out.update(downlink_stages(timings, down, onsets, wire, out["session"]))
    return out


@dataclass
class Wire:
    """What the loopback capture saw (``bench.loopback_capture.Capture``): each RTP packet's
    time per hop by (hop, SSRC, sequence number), and per agent session the times its WebSocket
    carried a sound's start up (appends) and down (deltas)."""

    rtp: dict[tuple[str, int, int], float]
    sessions: dict[str, tuple[list[float], list[float]]]  # session -> (appends, deltas)
    _sent: dict[int, list[float]] = field(default_factory=dict)

    def sent_by(self, ssrc: int) -> list[float]:
        """When the transceiver sent each packet of stream ``ssrc``, in order."""
        if not self._sent:
            for (hop, stream, _seq), t in self.rtp.items():
                if hop == T2R:
                    self._sent.setdefault(stream, []).append(t)
            for times in self._sent.values():
                times.sort()
        return self._sent.get(ssrc, [])

    def tick_spans_ms(self, min_packets: int) -> list[float]:
        """How long each of the transceiver's 20 ms ticks took to send its calls' packets: its
        packets are sent back to back (< ``TICK_GAP_S`` apart), the span of each run of at
        least ``min_packets``: time its event loop was held by the tick."""
        times = sorted(t for (hop, _s, _q), t in self.rtp.items() if hop == T2R)
        spans, start, count = [], None, 0
        for previous, t in zip([None, *times], times, strict=False):
            if previous is None or t - previous > TICK_GAP_S:
                if start is not None and count >= min_packets:
                    spans.append(1000 * (previous - start))  # type: ignore[operator]
                start, count = t, 0
            count += 1
        return spans


UPLINK_STAGES = ("caller", "relay", "transceiver", "agent")
DOWNLINK_STAGES = ("agent", "transceiver", "relay", "caller")


def uplink_stages(
    timings: dict[str, Any],
    marks: list[list[float]],
    agent: AgentCall,
    wire: Wire,
    session: str,
) -> dict[str, Any]:
    """Each beep's way up, hop by hop: marked -> on the wire to the relay (the caller's own)
    -> into the transceiver's socket (the relay) -> its append on the WebSocket (the
    transceiver) -> read by the agent."""
    ssrc, first = timings.get("ssrc"), timings.get("first_seq")
    stages: dict[str, list[float]] = {name: [] for name in UPLINK_STAGES}
    if ssrc is None or first is None:
        return {"uplink_stages_ms": stages}
    appends = wire.sessions[session][0]
    for sent, count, _late in marks:
        seq = (first + int(count)) & 0xFFFF
        c2r, r2t = wire.rtp.get((C2R, ssrc, seq)), wire.rtp.get((R2T, ssrc, seq))
        if c2r is None or r2t is None:
            continue
        on_wire, _ = pair([r2t], appends)
        if not on_wire:
            continue
        up = on_wire[0][1]
        read = [end for _, end in pair([up], agent.heard)[0]]
        stages["caller"].append(1000 * (c2r - sent))
        stages["relay"].append(1000 * (r2t - c2r))
        stages["transceiver"].append(1000 * (up - r2t))
        if read:
            stages["agent"].append(1000 * (read[0] - up))
    return {"uplink_stages_ms": stages}


def downlink_stages(
    timings: dict[str, Any],
    down: list[tuple[float, float]],
    onsets: dict[float, list[Any]],
    wire: Wire,
    session: str,
) -> dict[str, Any]:
    """Each beep's way down, hop by hop: the agent's log -> its delta on the WebSocket (the
    agent's own) -> its first packet out of the transceiver's socket (the transceiver: with
    whether it left on a 20 ms tick, the next packet 20 ms after it) -> into the caller's socket
    (the relay) -> handed to the caller."""
    ssrc = timings.get("far_ssrc")
    stages: dict[str, list[float]] = {name: [] for name in DOWNLINK_STAGES}
    ticked: list[bool] = []
    ahead: list[int] = []
    deltas = wire.sessions[session][1]
    out = {"downlink_stages_ms": stages, "downlink_wire_on_tick": ticked, "frames_ahead": ahead}
    if ssrc is None:
        return out
    sent = wire.sent_by(ssrc)
    for said, heard in down:
        seq = onsets[heard][1]
        t2r, r2c = wire.rtp.get((T2R, ssrc, seq)), wire.rtp.get((R2C, ssrc, seq))
        on_wire = [end for _, end in pair([said], deltas)[0]]
        if t2r is None or r2c is None or not on_wire or on_wire[0] > t2r:
            continue
        stages["agent"].append(1000 * (on_wire[0] - said))
        stages["transceiver"].append(1000 * (t2r - on_wire[0]))
        stages["relay"].append(1000 * (r2c - t2r))
        stages["caller"].append(1000 * (heard - r2c))
        ticked.append(on_tick(t2r, wire.rtp.get((T2R, ssrc, (seq + 1) & 0xFFFF))))
        # Packets of this call sent between the delta's arrival and its first packet: a tick
        # that sent the call's slot while the delta waited (silence), or audio queued ahead.
        ahead.append(bisect.bisect_left(sent, t2r) - bisect.bisect_right(sent, on_wire[0]))
    return out


def on_tick(heard: float, next_heard: float | None) -> bool:
    """A beep's first packet left on the transceiver's 20 ms tick, not at once: the packet
    after it (queued behind it, so sent on the next tick) came one frame later, to the
    half-millisecond. One that came at once in an open slot is followed sooner (the rest of its
    slot); one that arrived right at a slot's start is counted here too."""
    return next_heard is not None and abs(1000 * (next_heard - heard) - FRAME_MS) <= ON_TICK_MS


def echo_call(
    timings: dict[str, Any], window: tuple[float, float], wire: Wire | None = None
) -> dict[str, Any]:
    """One echo call's round trip over ``window``: its beep sent -> its echo's first sound;
    with ``wire``, the echo transceiver's part (the beep into its socket -> the echo's first
    packet out)."""
    marks = [m for m in timings["marks"] if window[0] <= m[0] <= window[1]]
    onsets = {o[0]: o for o in timings["onsets"]}
    trip, missed = pair([m[0] for m in marks], list(onsets))
    out: dict[str, Any] = {
        "id": timings["id"],
        "round_trip_ms": delays_ms(trip),
        "unmatched": {"round_trip": missed},
        "caller_late_ms": [1000 * x for x in grid_lateness([m[0] for m in marks])],
    }
    ssrc, first, far = timings.get("ssrc"), timings.get("first_seq"), timings.get("far_ssrc")
    if wire is None or ssrc is None or first is None or far is None:
        return out
    count_of = {m[0]: int(m[1]) for m in marks}
    own = []
    for sent, heard in trip:
        into = wire.rtp.get((R2T, ssrc, (first + count_of[sent]) & 0xFFFF))
        back = wire.rtp.get((T2R, far, onsets[heard][1]))
        if into is not None and back is not None:
            own.append(1000 * (back - into))
    out["echo_transceiver_ms"] = own
    return out


def spread(values_ms: Iterable[float]) -> dict[str, float]:
    """p50, p95, max and count of a direction's delays pooled over the calls, in ms."""
    ms = sorted(values_ms)
    return {
        "p50": percentile(ms, 0.5),
        "p95": percentile(ms, 0.95),
        "max": ms[-1] if ms else math.nan,
        "n": float(len(ms)),
    }


def pooled(calls: list[dict[str, Any]], key: str) -> dict[str, float]:
    return spread(v for c in calls for v in c.get(key, []))


def stage_spreads(calls: list[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """Each stage's delays (``uplink_stages_ms`` or ``downlink_stages_ms``) pooled over the
    calls: p50, p95, max, count."""
    names = UPLINK_STAGES if key.startswith("up") else DOWNLINK_STAGES
    return {name: spread(v for c in calls for v in c.get(key, {}).get(name, [])) for name in names}


def downlink_split(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The downlink's onsets apart by what held their first packet: end to end, those that
    left on the transceiver's 20 ms tick (told by the caller's arrivals) against those that
    left at once; with the capture, the transceiver's part of each beep by its own sends: at
    once (into the slot held open), on the tick (no slot was open: it left on the next tick),
    after a tick (one packet of its call left first: a tick sent the call's slot, silence,
    while the delta waited, and the beep took the next slot, up to a frame later), or behind
    earlier audio (two packets or more: the model server's previous answer, come late, was
    still being played)."""
    ends: dict[str, list[float]] = {"on_tick": [], "at_once": []}
    own: dict[str, list[float]] = {
        "at_once": [],
        "on_tick": [],
        "after_a_tick": [],
        "behind_earlier_audio": [],
    }
    for c in calls:
        for delay, tick in zip(
            c.get("downlink_ms", []), c.get("downlink_on_tick", []), strict=True
        ):
            ends["on_tick" if tick else "at_once"].append(delay)
        own_delays = (c.get("downlink_stages_ms") or {}).get("transceiver", [])
        flags = zip(c.get("downlink_wire_on_tick", []), c.get("frames_ahead", []), strict=True)
        for delay, (tick, ahead) in zip(own_delays, flags, strict=True):
            kind = (
                "behind_earlier_audio"
                if ahead >= 2
                else "after_a_tick"
                if ahead
                else "on_tick"
                if tick
                else "at_once"
            )
            own[kind].append(delay)
    return {
        "end_to_end": {k: spread(v) for k, v in ends.items()},
        "transceiver": {k: spread(v) for k, v in own.items()},
    }
