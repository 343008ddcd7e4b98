"""A real browser talks to the example voice agent through the whole stack, as an app written to
OpenAI's Realtime WebRTC flow does: Chromium -> relay -> transceiver (``--backend realtime``) ->
examples/voice_agent, in a loopback-only network namespace (as ``test_browser.py``).

The harness (``realtime_harness``) gets a client secret from ``/v1/realtime/client_secrets`` with
the operator's API key, opens ``/realtime?key=...`` (the page POSTs its offer to
``/v1/realtime/calls`` and talks on ``oai-events``), and Chromium's fake microphone plays a WAV
made here with espeak-ng: silence while the call connects, a sentence, silence while the agent
recognizes it and starts its answer ("you said ..."), then a second sentence over that answer,
and silence. The agent (``realtime_stack``) logs every event it gets. Then:

- the page heard the answer (a Web Audio tap: energy above a floor for hundreds of ms) and got
  the transcripts of both sides;
- the second sentence interrupted it: the answer's last packet reached the page within
  ``STOP_BOUND_MS`` of the agent's ``speech_started`` reaching it (one clock: the page's; the
  packets seen by a pass-through receive transform, before the jitter buffer), and the truncate
  the agent got says within ``TRUNCATE_BOUND_MS`` how much of the item the page heard.

The bounds are the issue's (issue 23). The 100 ms is asserted on what the stack controls, the
answer's packets reaching the page, and on when the page *hears* the answer stop (its Web Audio
tap falls quiet), which is that plus what Chromium's own jitter buffer holds then: 20-40 ms of
target on an idle machine since the transceiver sends silence on the tick (no step between an
answer's packets and the silence around them); what the buffer holds beyond its idle target
``IDLE_JITTER_TARGET_MS`` (80 ms seen on a loaded machine) is the browser's answer to the
machine's load and is added to the bound. Figures print with ``pytest -s`` (docs/realtime.md,
"Barge-in and the exact truncate"). One call for the whole module (about 20 s). Skipped, with
the reason, only where Chromium, unshare, ip or espeak-ng is missing (CI installs all four).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import wave
from pathlib import Path
from typing import Any

import pytest

from tests.support.voice_agent import spoken
from tests.transceiver import realtime_figures as figures
from tests.transceiver.test_browser import CHROMIUM, LOOPBACK, completed, describe, run_harness

RATE_HZ = 24_000
# Numbers: pocketsphinx hears most of them, and "you said one two three..." is a long answer
# (~4.5 s) for its recognition (0.8 s on an idle machine, 3.1 s seen on a busy 2-core one).
SENTENCE = "one two three four five six seven eight nine ten eleven twelve"
INTERRUPTION = "wait a moment please"
# The microphone's timeline, s: the call connects in ~0.5 s; the agent waits for 0.5 s of
# silence, recognizes, and answers. The interruption's speech_started comes GAP_S - 0.43 s -
# the recognition's time into the answer: 2.8 s (0.8 s recognition) to 0.5 s (3.1 s).
LEAD_S, GAP_S, TAIL_S = 3.0, 4.0, 8.0
STOP_BOUND_MS = 100  # speech_started arrived -> the page hears the answer stop
# Chromium's jitter buffer target on an idle loopback call (20-40 ms seen): what it holds beyond
# this at the cut is its answer to the machine's load (80 ms seen with other work on both
# cores), added to the bound of what the page hears, and printed.
IDLE_JITTER_TARGET_MS = 40
TRUNCATE_BOUND_MS = 40  # the truncate's audio_end_ms against what the page heard of the item
MIN_HEARD_MS = 300  # an answer, not a click
MIN_ANSWER_RMS = 0.01  # -40 dBFS over its loud quanta: speech, not codec noise
TOOLS = ("unshare", "ip", "espeak-ng")
REPORT_ENV = "RTCEDGE_BROWSER_REPORT"  # a file to write the harness's report to


def write_microphone(path: Path) -> float:
    """The fake microphone's WAV (PCM16 mono, 24 kHz); how long it plays, in s."""

    def silence(seconds: float) -> bytes:
        return bytes(round(seconds * RATE_HZ) * 2)

    pcm = b"".join(
        (silence(LEAD_S), spoken(SENTENCE), silence(GAP_S), spoken(INTERRUPTION), silence(TAIL_S))
    )
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE_HZ)
        wav.writeframes(pcm)
    return len(pcm) / 2 / RATE_HZ


@pytest.fixture(scope="module")
def call(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One call as the harness reports it, with the agent's event log (``agent_log``)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not CHROMIUM.exists():
        missing.append(str(CHROMIUM))
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (.ci/run installs them)")
    folder = tmp_path_factory.mktemp("realtime")
    seconds = write_microphone(folder / "microphone.wav")
    (folder / "api-key").write_text(f"sk-rtcedge-{secrets.token_hex(24)}\n")
    (folder / "token-secret").write_text(secrets.token_hex(32) + "\n")
    log = folder / "agent-events.jsonl"
    stack = (
        f"{sys.executable} -m tests.transceiver.realtime_stack --http {{http}} --relay {{relay}}"
        f" --log-events {log} --realtime-key-file {folder / 'api-key'}"
        f" --token-secret-file {folder / 'token-secret'}"
    )
    options = (
        f"--microphone {folder / 'microphone.wav'} --microphone-seconds {seconds:.2f}"
        f" --api-key-file {folder / 'api-key'}"
    )
    report = run_harness(LOOPBACK, stack, options, harness="tests.transceiver.realtime_harness")
    lines = log.read_text().splitlines() if log.exists() else []
    report["agent_log"] = [json.loads(line) for line in lines]
    if os.environ.get(REPORT_ENV):  # the whole report, tap and packets included, to look at
        Path(os.environ[REPORT_ENV]).write_text(json.dumps(report))
    return report


@pytest.fixture(scope="module")
def answer(call: dict[str, Any]) -> figures.Answer:
    """The answer the second sentence interrupted, as the page heard it."""
    call = connected(call)
    return figures.answer(call["events"], figures.heard(call["tap"]))


def connected(call: dict[str, Any]) -> dict[str, Any]:
    call = completed(call)
    assert call["error"] is None, brief(call)
    return call


def brief(call: dict[str, Any]) -> str:
    """The report without its bulk (the tap, the levels), for assertion messages."""
    bulky = ("tap", "levels", "neteq", "agent_log")
    kept = {k: v for k, v in call.items() if k not in bulky}
    kept["events"] = [(round(e["t"]), e["type"]) for e in call.get("events") or []]
    done = figures.logged(call.get("agent_log") or [], "out", "response.done")
    kept["agent_timings"] = [(d.get("response") or {}).get("metadata") for d in done]
    return describe(kept)


def test_the_page_calls_with_a_client_secret(call: dict[str, Any]) -> None:
    call = connected(call)
    assert call["connected"] and call["tap_state"] == "running", brief(call)
    assert call["client_secret"]["expires_at"] > 0, brief(call)
    assert call["state_after_hangup"]["connectionState"] == "closed", brief(call)
    assert call["state_after_hangup"]["error"] is None, brief(call)


def test_the_agents_spoken_answer_is_heard(call: dict[str, Any], answer: figures.Answer) -> None:
    assert answer.onset is not None, (answer.notes, brief(call))
    assert answer.loud_ms >= MIN_HEARD_MS, (answer, brief(call))
    assert answer.rms >= MIN_ANSWER_RMS, answer
    print(f"\nanswer: heard from {answer.onset - answer.created_at:.0f} ms after "
          f"response.created, {answer.loud_ms:.0f} ms loud at {answer.rms:.3f} RMS")  # fmt: skip


def test_the_page_gets_the_transcripts(call: dict[str, Any], answer: figures.Answer) -> None:
    events = connected(call)["events"]
    heard = figures.first(events, "conversation.item.input_audio_transcription.completed")
    assert heard is not None and heard["transcript"].strip(), brief(call)
    deltas = [e for e in events if e["type"] == "response.output_audio_transcript.delta"
              and e.get("response_id") == answer.response_id]  # fmt: skip
    assert deltas, brief(call)
    said = next(e["transcript"] for e in events if e["type"] ==
                "response.output_audio_transcript.done"
                and e.get("response_id") == answer.response_id)  # fmt: skip
    assert said.startswith("you said"), said
    print(f"\nthe agent heard {heard['transcript']!r} and said {said!r}")


def test_speech_over_the_answer_stops_it(call: dict[str, Any], answer: figures.Answer) -> None:
    """The answer's audio stops reaching the page within ``STOP_BOUND_MS`` of speech_started
    reaching it (the stack's part: the transceiver cuts, the packets in flight land), and the
    page then hears it stop once its own jitter buffer has played out (printed)."""
    events = connected(call)["events"]
    assert figures.first(events, "output_audio_buffer.cleared") is not None, (
        answer.notes,
        brief(call),
    )
    heard = answer.stop_after_barge_in_ms
    assert heard is not None and answer.barge_in_at is not None, (answer.notes, brief(call))
    sent = agent_sent_ms(call, answer.item_id)
    assert answer.heard_ms is not None and answer.heard_ms < sent - 200, "cut short"
    packets = figures.received(call["packets"], call["time_origin_ms"])
    last = figures.last_packet_of(packets, answer, truncate_of(call)["audio_end_ms"])
    assert last is not None, (answer, call["packets"])
    arrived = last.arrived - answer.barge_in_at
    print(f"\nbarge-in {answer.barge_in_at - answer.onset:.0f} ms into the answer (the agent had "
          f"sent {sent:.0f} ms of it): its last packet reached the page {arrived:+.1f} ms from "
          f"speech_started, the page heard it stop {heard:+.1f} ms from it; "
          f"{page_path(call, answer)}")  # fmt: skip
    assert arrived <= STOP_BOUND_MS, page_path(call, answer)
    target = figures.receive_path(call, answer).get("its target", 0.0)
    allowed = STOP_BOUND_MS + max(0.0, target - IDLE_JITTER_TARGET_MS)
    assert heard <= allowed, page_path(call, answer)


def test_the_truncate_says_what_the_page_heard(
    call: dict[str, Any], answer: figures.Answer
) -> None:
    truncate = truncate_of(connected(call))
    assert truncate["item_id"] == answer.item_id, (truncate, answer)
    assert answer.heard_ms is not None, (answer.notes, brief(call))
    gap = truncate["audio_end_ms"] - answer.heard_ms
    print(f"\ntruncate: audio_end_ms {truncate['audio_end_ms']}, the page heard "
          f"{answer.heard_ms:.1f} ms of the item ({gap:+.1f} ms)")  # fmt: skip
    assert abs(gap) <= TRUNCATE_BOUND_MS, (truncate, answer)


def truncate_of(call: dict[str, Any]) -> dict[str, Any]:
    """The one conversation.item.truncate the agent received."""
    truncates = figures.logged(call["agent_log"], "in", "conversation.item.truncate")
    assert len(truncates) == 1, truncates
    return dict(truncates[0])


def agent_sent_ms(call: dict[str, Any], item_id: str | None) -> float:
    """How much audio of ``item_id`` the agent sent (its log), ms."""
    deltas = figures.logged(call["agent_log"], "out", "response.output_audio.delta")
    return sum(d["delta_bytes"] for d in deltas if d.get("item_id") == item_id) / (RATE_HZ / 500)


def page_path(call: dict[str, Any], answer: figures.Answer) -> str:
    """Where the time from the cut to the page's silence goes, for the figures' line."""
    path = figures.receive_path(call, answer)
    return ", ".join(f"{k} {v:.1f} ms" for k, v in path.items())
