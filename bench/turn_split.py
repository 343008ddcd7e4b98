"""The turn benchmark's split of a turn's latency, from timestamps taken at three places, sans I/O.

A turn, from the end of the caller's speech to the first audio of the answer at the caller, is
cut at moments each read on the machine's one wall clock (``time.time()``, CLOCK_REALTIME: every
process of the run reads the same one):

    caller   sent     the packet that ends its speech: the last whose decoded audio peaks at
                      ``AUDIBLE_PEAK`` or more (``testbed.callers.speech_packets``), marked by
                      its clocked sender as it sends it (``OpusToneTrack.marks``)
    agent    heard    the ``input_audio_buffer.append`` carrying it read from the WebSocket:
                      the last append with ``audio_peak`` >= ``AUDIBLE_PEAK`` within
                      ``MAX_UPLINK_S`` of the mark (the same rule on the same packet, decoded
                      by the transceiver), the agent's ``--log-events`` ``in`` line
    agent    decided  its voice activity detector declared the end (``turn.speech_stopped``)
    agent    asr      recognition started / done in its process (``turn.recognition_*``)
    agent    tts      synthesis started / gave its first audio (``turn.synthesis_*``)
    agent    sent     the answer's first ``response.output_audio.delta`` about to be written
                      to its WebSocket (its ``out`` line)
    caller   heard    the first packet of sound after silence handed to the caller, after
                      that delta (``EchoCounter.onsets``)

So the stages (``STAGES``) follow one another and add up to the total; the residual (total -
their sum) is zero but for rounding when every moment of a turn was found, and is printed as the
check of that. Grouped as issue 23 names them (``PARTS``): VAD wait (heard -> decided: the
caller's speech end, less the uplink's transport), recognition, synthesis, transport (uplink:
caller sent -> agent heard; downlink: agent sent -> caller heard, through the transceiver and
the relay both ways, and the measuring ends' own hand-overs), and the agent's waits between
them (the recognizer's queue, the hand-overs between its event loop, threads and process), which
the four would otherwise hide.

A turn one of whose moments is missing is counted by the first one missing
(``unmatched``), never guessed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench.realtime_latency import APPEND, DELTA, spread
from testbed.callers import AUDIBLE_PEAK

MAX_UPLINK_S = 0.5  # the caller's last sound sent -> the agent read it; later is no match
MAX_DECISION_S = 5.0  # the agent read it -> its detector decided (the silence is 0.5 s)
MAX_DOWNLINK_S = 2.0  # the agent sent the first delta -> the caller heard the first sound
BURST_SLACK_MS = 40.0  # two frames: the detector's silence read this much faster than it plays

# (stage, its start, its end): the moments of ``Turn.moments``, in order.
STAGES = (
    ("uplink", "caller_sent", "agent_heard"),
    ("vad_wait", "agent_heard", "decided"),
    ("recognition_queue", "decided", "recognition_started"),
    ("recognition", "recognition_started", "recognition_done"),
    ("to_synthesis", "recognition_done", "synthesis_started"),
    ("synthesis", "synthesis_started", "synthesis_audio"),
    ("to_first_delta", "synthesis_audio", "first_delta"),
    ("downlink", "first_delta", "caller_heard"),
)
PARTS = {
    "vad_wait": ("vad_wait",),
    "recognition": ("recognition",),
    "synthesis": ("synthesis",),
    "transport": ("uplink", "downlink"),
    "agent_waits": ("recognition_queue", "to_synthesis", "to_first_delta"),
}


@dataclass
class AgentSession:
    """What the agent's log says of one session (call): the appends with sound it read, its
    detector's decisions, and each turn's moments by the user item and the response."""

    loud_appends: list[float] = field(default_factory=list)  # sorted wall times
    decisions: list[dict[str, Any]] = field(default_factory=list)  # turn.speech_stopped lines
    by_item: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    response_of: dict[str, str] = field(default_factory=dict)  # user item -> its response
    synthesis_audio: dict[str, dict[str, Any]] = field(default_factory=dict)  # by response
    first_delta: dict[str, float] = field(default_factory=dict)  # response -> wall time

    def line(self, event: dict[str, Any]) -> None:
        kind, t, direction = event.get("type"), event.get("t"), event.get("dir")
        if not isinstance(t, float | int) or not isinstance(kind, str):
            return
        if direction == "in" and kind == APPEND:
            if event.get("audio_peak", 0) >= AUDIBLE_PEAK:
                bisect.insort(self.loud_appends, float(t))
        elif direction == "out" and kind == DELTA:
            response = event.get("response_id")
            if isinstance(response, str) and response not in self.first_delta:
                self.first_delta[response] = float(t)
        elif direction == "turn":
            self._mark(kind, event)

    def _mark(self, kind: str, event: dict[str, Any]) -> None:
        item, response = event.get("item_id"), event.get("response_id")
        if kind == "turn.speech_stopped":
            self.decisions.append(event)
        elif kind == "turn.synthesis_audio" and isinstance(response, str):
            self.synthesis_audio[response] = event
        elif isinstance(item, str):
            self.by_item.setdefault(item, {})[kind] = event
            if kind == "turn.synthesis_started" and isinstance(response, str):
                self.response_of[item] = response


def agent_sessions(lines: Iterable[dict[str, Any]]) -> dict[str, AgentSession]:
    """The agent's sessions by their tag, from its ``--log-events`` lines."""
    sessions: dict[str, AgentSession] = {}
    for event in lines:
        tag = event.get("call")
        if isinstance(tag, str):
            sessions.setdefault(tag, AgentSession()).line(event)
    for session in sessions.values():
        session.decisions.sort(key=lambda e: e["t"])
    return sessions


def turn(
    sent: float, session: AgentSession, onsets: list[float], until: float = math.inf
) -> dict[str, Any]:
    """One turn whose speech ended (the caller sent its last sound) at wall time ``sent``; the
    caller's onsets are sorted wall times; no moment after ``until`` (the next turn's end of
    speech) belongs to it. ``moments``, ``stages_ms``, ``parts_ms``, ``total_ms``,
    ``residual_ms``, the detector's view (``vad``), or ``missing``: the first moment not found."""
    moments: dict[str, float] = {"caller_sent": sent}
    out: dict[str, Any] = {"moments": moments}
    heard = [t for t in session.loud_appends if sent <= t <= min(sent + MAX_UPLINK_S, until)]
    if not heard:
        return {**out, "missing": "agent_heard"}
    moments["agent_heard"] = heard[-1]
    decision = next(
        (
            e
            for e in session.decisions
            if heard[-1] <= e["t"] <= min(heard[-1] + MAX_DECISION_S, until)
        ),
        None,
    )
    if decision is None:
        return {**out, "missing": "decided"}
    moments["decided"] = float(decision["t"])
    item = str(decision.get("item_id"))
    out["item_id"] = item
    out["vad"] = detector_view(decision, heard[-1])
    marks = session.by_item.get(item, {})
    for name in ("recognition_started", "recognition_done", "synthesis_started"):
        line = marks.get(f"turn.{name}")
        if line is None:
            return {**out, "missing": name}
        moments[name] = float(line["t"])
    out["transcript"] = marks["turn.recognition_done"].get("transcript")
    response = session.response_of.get(item, "")
    out["response_id"] = response
    if response not in session.synthesis_audio:
        return {**out, "missing": "synthesis_audio"}
    moments["synthesis_audio"] = float(session.synthesis_audio[response]["t"])
    if response not in session.first_delta:
        return {**out, "missing": "first_delta"}
    delta = moments["first_delta"] = session.first_delta[response]
    i = bisect.bisect_left(onsets, delta)
    if i == len(onsets) or onsets[i] > min(delta + MAX_DOWNLINK_S, until):
        return {**out, "missing": "caller_heard"}
    moments["caller_heard"] = onsets[i]
    return {**out, **split(moments)}


def detector_view(decision: dict[str, Any], heard: float) -> dict[str, Any]:
    """How the detector judged the turn: the silence it waited for (audio ms, from the speech
    end it judged to its decision), how far after the caller's last sound it put that end (wall
    ms between reading the two appends: > 0 when it judged quiet frames after the sound voiced),
    and whether that silence came faster than real time (``burst``: a sender or a reader that
    stalled, then caught up, which shortens the wait a caller speaking in real time has)."""
    silence = float(decision["detected_ms"]) - float(decision["speech_end_ms"])
    view: dict[str, Any] = {"silence_ms": silence}
    voiced = decision.get("last_voiced_t")
    if isinstance(voiced, float | int):
        view["judged_end_after_sound_ms"] = 1000 * (float(voiced) - heard)
        silence_wall_ms = 1000 * (float(decision["t"]) - float(voiced))
        view["burst"] = silence_wall_ms < silence - BURST_SLACK_MS
    return view


def split(moments: dict[str, float]) -> dict[str, Any]:
    """Every moment found: the stages and parts in ms, the total and what the stages leave."""
    stages = {name: 1000 * (moments[end] - moments[start]) for name, start, end in STAGES}
    total = 1000 * (moments["caller_heard"] - moments["caller_sent"])
    return {
        "stages_ms": stages,
        "parts_ms": {part: sum(stages[s] for s in names) for part, names in PARTS.items()},
        "total_ms": total,
        "residual_ms": total - sum(stages.values()),
    }


def call_turns(
    timings: dict[str, Any], session: AgentSession | None, turns: int
) -> list[dict[str, Any]]:
    """A call's first ``turns`` turns (the caller's ``timings``: its marks and onsets), each
    split, or with what is missing; all missing the agent's session if it has none."""
    sent = sorted(m[0] for m in timings["marks"])[:turns]
    if session is None:
        return [{"moments": {"caller_sent": t}, "missing": "agent_session"} for t in sent]
    onsets = sorted(o[0] for o in timings["onsets"])
    return [
        turn(t, session, onsets, sent[i + 1] if i + 1 < len(sent) else math.inf)
        for i, t in enumerate(sent)
    ]


def summarize(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the turns split: p50/p95/max/n of the total, each part, each stage, the residual,
    the detector's view; the turns missing a moment, by the first one missing; the turns
    whose silence came in a burst (``detector_view``)."""
    done = [t for t in turns if "total_ms" in t]
    missing: dict[str, int] = {}
    for t in turns:
        if "missing" in t:
            missing[t["missing"]] = missing.get(t["missing"], 0) + 1
    vad_keys = ("silence_ms", "judged_end_after_sound_ms")
    return {
        "turns": len(turns),
        "matched": len(done),
        "unmatched": missing,
        "bursts": sum(bool(t["vad"].get("burst")) for t in done),
        "total_ms": spread(t["total_ms"] for t in done),
        "residual_ms": spread(t["residual_ms"] for t in done),
        "parts_ms": {p: spread(t["parts_ms"][p] for t in done) for p in PARTS},
        "stages_ms": {s: spread(t["stages_ms"][s] for t in done) for s, _, _ in STAGES},
        "vad": {k: spread(t["vad"][k] for t in done if k in t["vad"]) for k in vad_keys},
    }
