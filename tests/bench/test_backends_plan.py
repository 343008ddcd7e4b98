"""The backends benchmark's plan and naming, with numbers: each rate's backends then its echo
reference at every N and round; a call named by its signed WHIP resource; ``sessions
--backend NAME`` routed to the backends command, the echo sessions benchmark left as it is."""

from __future__ import annotations

import time

import click

from bench.backends import BACKENDS, plan_steps, resource_session
from common.hint import Keyring
from common.sessionid import sign_session_id
from rtcedge.cli import main


def test_each_rate_runs_its_backends_then_its_echo_reference() -> None:
    plan = plan_steps(("realtime", "media-streams", "websocket"), (1, 20), 2)
    one_round = ["realtime", "websocket", "echo-24000", "media-streams", "echo-8000"]
    assert [name for n, name, r in plan if (n, r) == (20, 1)] == one_round
    assert len(plan) == 2 * 2 * 5 and plan[0] == (1, "realtime", 0)
    assert {spec.reference for spec in BACKENDS.values()} == {"echo-24000", "echo-8000"}


def test_a_call_is_named_by_the_session_id_its_resource_signs() -> None:
    keyring, call_id = Keyring.generate(1), "ab" * 16
    resource = sign_session_id(keyring, 0, 3, time.time(), call_id)
    assert resource_session({"location": f"/whip/{resource}"}, keyring) == call_id
    assert resource_session({"location": f"/whip/{resource}"}, Keyring.generate(1)) is None
    assert resource_session({"location": ""}, keyring) is None


def test_sessions_with_a_backend_is_the_backends_benchmark() -> None:
    group = main.commands["bench"]
    ctx = click.Context(group)
    name, command, rest = group.resolve_command(ctx, ["sessions", "--backend=websocket"])
    assert name == "backends" and command is not None and command.name == "backends"
    assert rest == ["--backend=websocket"]
    name, command, _ = group.resolve_command(ctx, ["sessions", "--quick"])
    assert name == "sessions" and command is not None and command.name == "sessions"
