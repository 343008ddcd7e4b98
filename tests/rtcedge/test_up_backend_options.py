"""``rtcedge up``'s backend options: each mistake is one line naming the option, found by the
transceiver's own rules before anything starts; the options are the transceiver's (flag,
variable, choices), and what ``up`` passes on keeps the URL and the key off command lines."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rtcedge import cli
from rtcedge.checks import BACKEND_URL_ENV, UpBackend
from testbed.ports import free_port
from transceiver.cli import main as transceiver_main
from transceiver.config import BACKEND_KEY_ENV

UP_OPTIONS = {name for param in cli.up.params for name in param.opts} | {"--help"}
REALTIME = ["--backend", "realtime", "--backend-url", "ws://127.0.0.1:9/v1/realtime?model=m"]
KEY = "sk-model-server-" + "k" * 24
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def nothing_starts(monkeypatch):
    """``up`` fails the test if it gets as far as starting anything."""

    def started(*args, **kwargs):
        raise AssertionError("`up` started its services")

    monkeypatch.setattr("rtcedge.up.run_local", started)
    monkeypatch.setattr("testbed.voice_agent.VoiceAgentProcess.start", started)
    for name in ("RTCEDGE_BACKEND_URL", "RTCEDGE_BACKEND_KEY", "RTCEDGE_AUDIO_FORMAT"):
        monkeypatch.delenv(name, raising=False)


def run_up(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(cli.main, ["up", *args], prog_name="rtcedge", env=env)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--backend-url", "ws://b/"], "--backend-url: the echo backend takes none: add "
         "--backend websocket or realtime"),
        (["--backend", "websocket", "--backend-url", "http://b/"], "--backend-url: backend url "
         "must be ws://"),
        (["--backend", "realtime", "--backend-url", "http://b/v1/realtime"], "--backend-url: "
         "backend url must be ws://"),
        (["--backend", "grpc", "--backend-url", "http://b:1"], "--backend-url: backend url "
         "must be grpc://HOST:PORT or grpcs://HOST:PORT, got 'http://b:1'"),
        (["--backend-url", "grpc://b:1"], "--backend-url: the echo backend takes none"),
        (["--backend", "realtime", "--backend-url", "ws://b/v1/chat"], "--backend-url: backend "
         "url path must end in /realtime"),
        (["--backend", "realtime"], "--backend-url: required with --backend realtime"),
        ([*REALTIME, "--audio-format", "opus"], "--audio-format: only for --backend echo"),
        (["--backend", "websocket", "--backend-url", "ws://b/", "--audio-format", "opus"],
         "--audio-format: only for --backend echo"),
        (["--agent", "--audio-format", "opus"], "--audio-format: only for --backend echo"),
        (["--backend", "websocket", "--backend-url", "ws://b/", "--audio-rate", "16000"],
         "--audio-rate: a websocket backend chooses its rate per call"),
        (["--backend-key-file", "/etc/hostname"], "--backend-key-file: only for --backend "
         "websocket, realtime"),
        ([*REALTIME, "--backend-key-file", "/nonexistent"], "--backend-key-file: cannot read"),
        ([*REALTIME, "--realtime-session-file", "/nonexistent"], "--realtime-session-file: "
         "cannot read /nonexistent"),
        (["--agent", "--backend", "realtime"], "--agent: runs its own model server: drop "
         "--backend"),
        (["--agent", "--backend-url", "ws://b/v1/realtime"], "--agent: runs its own model "
         "server: drop --backend-url"),
        (["--agent", "--backend-key-file", "/etc/hostname"], "--agent: runs its own model "
         "server: drop --backend-key-file"),
    ],
)  # fmt: skip
def test_a_backend_mistake_is_one_line_naming_the_option(nothing_starts, args, says):
    result = run_up(args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {says}"), result.output
    assert "Traceback" not in result.output and "python -m" not in result.output
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", result.output))
    assert named <= UP_OPTIONS, f"names options `up` does not have: {named - UP_OPTIONS}"


def test_a_plugin_refusing_its_options_fails_up_before_a_start(nothing_starts, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES / "backend_plugin"))
    plugin = ["--backend", "rtcedge_delay:make_backend"]
    result = run_up([*plugin, "--backend-url", "ws://b/"])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines()[-1] == (
        "Error: --backend: rtcedge_delay:make_backend: the delay backend takes no --backend-url, "
        "key or --audio-format opus"
    )
    assert "python -m" not in result.output
    missing = run_up(["--backend", "rtcedge_delay:nope"])
    assert "Error: --backend: rtcedge_delay:nope: rtcedge_delay has no 'nope'" in missing.output


def test_agent_refuses_a_backend_url_from_the_environment_too(nothing_starts):
    result = run_up(["--agent"], env={"RTCEDGE_BACKEND_URL": "ws://b/v1/realtime"})
    assert result.exit_code == 2
    assert "Error: --agent: runs its own model server: unset RTCEDGE_BACKEND_URL" in result.output


def test_the_key_goes_with_realtime_only(nothing_starts, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    both = run_up([*REALTIME, "--backend-key-file", str(key_file)], env={BACKEND_KEY_ENV: KEY})
    assert both.exit_code == 2 and "give it or RTCEDGE_BACKEND_KEY, not both" in both.output
    two_lines = run_up(REALTIME, env={BACKEND_KEY_ENV: "a\nb"})
    assert two_lines.exit_code == 2
    assert "Error: RTCEDGE_BACKEND_KEY: expected one key on one line" in two_lines.output


def test_ups_backend_options_are_the_transceivers():
    serve = transceiver_main.commands["serve"]
    theirs = {opt: param for param in serve.params for opt in param.opts}
    for param in cli.up.params:
        flag = param.opts[0]
        if flag in ("--backend", "--backend-url", "--backend-key-file", "--audio-format",
                    "--audio-rate", "--realtime-session-file"):  # fmt: skip
            other = theirs[flag]
            assert isinstance(param, click.Option) and isinstance(other, click.Option)
            assert param.envvar == other.envvar, flag
            assert param.default == other.default, flag
            assert getattr(param.type, "choices", None) == getattr(other.type, "choices", None)


def test_the_url_and_the_key_are_passed_on_by_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(BACKEND_KEY_ENV, KEY)
    url = "ws://127.0.0.1:9/v1/realtime?model=m&token=secret"
    args, env = UpBackend("realtime", url, audio_rate="16000").transceiver_options()
    assert env == {BACKEND_URL_ENV: url, BACKEND_KEY_ENV: KEY}
    assert args == ["--backend", "realtime", "--audio-format", "pcm16", "--audio-rate", "16000"]
    session = tmp_path / "session.json"
    args, env = UpBackend(
        "realtime", url, key_file="key.txt", session_file=str(session)
    ).transceiver_options()
    assert env == {BACKEND_URL_ENV: url}  # the file's name as an argument, the key never
    assert args[-4:] == ["--realtime-session-file", str(session),
                         "--backend-key-file", str(tmp_path.cwd() / "key.txt")]  # fmt: skip
    # The agent's URL and key, not the user's; echo takes no key.
    agent = UpBackend("realtime", agent=True).transceiver_options("ws://a/v1/realtime", "k")
    assert agent[1] == {BACKEND_URL_ENV: "ws://a/v1/realtime", BACKEND_KEY_ENV: "k"}
    assert UpBackend().transceiver_options() == (
        ["--backend", "echo", "--audio-format", "pcm16"],
        {},
    )


def test_agent_without_what_it_needs_says_what_to_install(nothing_starts, monkeypatch):
    monkeypatch.setattr("testbed.voice_agent.MODULES", ("no_such_module_for_rtcedge",))
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    result = run_up(["--agent", "--http", http, "--relay", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == 2, result.output
    assert "Error: --agent: needs no_such_module_for_rtcedge: pip install -e '.[agent]'" in (
        result.output
    )
