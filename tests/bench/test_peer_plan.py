"""The peer benchmark's plan and judgement, without servers: ``sessions --reference janus`` is
the peer command, the servers alternate which goes first, and issue 26's criteria are judged
from the figures per N where both servers ran that N."""

from __future__ import annotations

import click

from bench.peer import PeerConfig, criteria, summarize, trial_order
from rtcedge.cli import main


def test_sessions_with_a_reference_is_the_peer_benchmark() -> None:
    group = main.commands["bench"]
    ctx = click.Context(group)
    name, command, rest = group.resolve_command(ctx, ["sessions", "--reference", "janus"])
    assert name == "peer" and command is not None and command.name == "peer"
    assert rest == ["--reference", "janus"]


def test_neither_server_always_goes_first() -> None:
    assert [trial_order(r) for r in (1, 2, 3)] == [
        ("rtcedge", "janus"),
        ("janus", "rtcedge"),
        ("rtcedge", "janus"),
    ]


def trial(server: str, n: int, per_call: float, delay_ms: float, ok: bool = True) -> dict:
    calls = [{"echo_delay_ms": delay_ms, "offer_to_connected_s": 0.1}] * 4
    return {"server": server, "sessions": n, "round": 1, "ok": ok,
            "cpu_per_call_pct": per_call, "parts_cpu_pct": {server: per_call * n},
            "frame_loss_pct": {"median": 0.1, "worst": 0.2}, "echo_frames": 500,
            "calls": calls}  # fmt: skip


def test_the_criteria_follow_the_figures_of_both_servers() -> None:
    trials = [
        trial("rtcedge", 10, 1.0, 6.0),
        trial("janus", 10, 0.5, 1.0),
        trial("rtcedge", 40, 0.7, 20.0, ok=False),
        trial("janus", 40, 0.5, 1.0),
    ]
    summary = summarize(trials, PeerConfig(sessions=(10, 40)))
    assert summary["by_n"]["10"]["cpu_ratio"] == 2.0
    judged = {c["name"].split(":")[0]: c for c in summary["criteria"]}
    assert judged["CPU per call at N=40"]["pass"]  # 1.4 x <= 1.5 x
    assert judged["opus echo delay at N=10"]["pass"]  # 6 <= 1 + 5, p95 6 <= 1 + 10
    assert not judged["opus echo delay at N=40"]["pass"]  # 20 > 1 + 5
    calls = judged["calls per core"]
    assert not calls["pass"] and "rtcedge 10, Janus 40" in calls["detail"]


def test_a_criterion_whose_n_was_not_run_by_both_is_left_out() -> None:
    by_n = summarize(
        [
            trial("rtcedge", 10, 1.0, 5.0),
            trial("janus", 10, 0.5, 1.0),
            trial("janus", 40, 0.5, 1.0),
        ],
        PeerConfig(sessions=(10, 40)),
    )["by_n"]
    names = [c["name"] for c in criteria(by_n)]
    assert not any("N=40" in name for name in names)
    assert any("N=10" in name for name in names)
