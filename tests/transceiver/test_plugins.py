"""Backend plugins: ``--backend module:factory`` and the ``rtcedge.backends`` entry points.

The acceptance test installs the example plugin (examples/backend_plugin/) as a package, for
real: built and ``pip install``ed (offline) into a venv of its own, made with
``--system-site-packages`` (rtcedge's dependencies come from this environment, the checkout
through a .pth file). In that venv ``--backend list`` shows it, and a transceiver with
``--backend delay`` answers an aiortc caller through a relay: the caller hears its own tone, half
a second late, and gets the plugin's events. The other tests load modules written to a
temporary directory: each way a plugin can be wrong is one line naming --backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from rtcedge import cli as rtcedge_cli
from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.tone_call import run_client
from tests.support.waits import run
from transceiver.backends import plugins
from transceiver.backends.echo import EchoBackend
from transceiver.cli import build_config, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "backend_plugin"
KEYRING = Keyring.generate(1).to_json()
BASE = ["serve", "--id", "0", "--advertise", "127.0.0.1:3478"]
MODULE = "rtcedge_test_plugin"
PLUGIN = """
from transceiver.backends.echo import EchoBackend

GOT = []


def echo(options):
    GOT.append(options)
    return EchoBackend(sample_rate=options.sample_rate or 48000)


def not_a_backend(options):
    return "echo"


def refuses(options):
    raise ValueError("no url, please")


def broken(options):
    raise RuntimeError("a bug in the plugin")


class Nested:
    make = staticmethod(echo)


factory_value = 42
"""


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """``rtcedge_test_plugin`` (PLUGIN) and ``rtcedge_test_broken`` (whose import fails),
    importable for the test only."""
    (tmp_path / f"{MODULE}.py").write_text(PLUGIN)
    (tmp_path / "rtcedge_test_broken.py").write_text("import no_such_module_for_rtcedge\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in (MODULE, "rtcedge_test_broken"):
        sys.modules.pop(name, None)


def serve(args: list[str], env: dict[str, str] | None = None):
    return CliRunner().invoke(main, args, env={"RTCEDGE_KEYRING_JSON": KEYRING, **(env or {})})


def config(monkeypatch, args: list[str]):
    monkeypatch.setenv("RTCEDGE_KEYRING_JSON", KEYRING)
    context = main.commands["serve"].make_context("serve", BASE[1:] + args)
    return build_config(context.params)


@pytest.mark.parametrize(
    ("backend", "says"),
    [
        ("no_such_module_for_rtcedge:make", "no_such_module_for_rtcedge:make: cannot import "
         "no_such_module_for_rtcedge: ModuleNotFoundError: No module named"),
        ("rtcedge_test_broken:make", "rtcedge_test_broken:make: cannot import "
         "rtcedge_test_broken: ModuleNotFoundError: No module named 'no_such_module_for_rtcedge'"),
        (f"{MODULE}:missing", f"{MODULE}:missing: {MODULE} has no 'missing'"),
        (f"{MODULE}:factory_value", f"{MODULE}:factory_value: factory_value is not callable "
         "(int)"),
        (f"{MODULE}:not_a_backend", f"{MODULE}:not_a_backend returned str, not a "
         "transceiver.backend.Backend"),
        (f"{MODULE}:refuses", f"{MODULE}:refuses: no url, please"),
        (f"{MODULE}:broken", f"{MODULE}:broken failed: RuntimeError: a bug in the plugin"),
        ("not a module:x", "'not a module:x' is not MODULE:FACTORY"),
        ("no-such-backend", "unknown backend 'no-such-backend' (echo, websocket, realtime, "
         "media-streams"),
    ],
)  # fmt: skip
def test_a_plugin_that_cannot_be_used_is_one_line_naming_backend(plugin_module, backend, says):
    result = serve([*BASE, "--backend", backend])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: --backend: {says}"), result.output
    assert "Traceback" not in result.output


def test_a_factory_gets_the_backend_options_and_its_backend_serves(plugin_module, monkeypatch):
    monkeypatch.setenv("RTCEDGE_BACKEND_KEY", "sk-plugin")
    # A plugin's URL is its own business: any scheme; the key, the CA and the audio go to it.
    options = ["--backend-url", "http://svc/", "--backend-ca-file", "/etc/hostname"]
    cfg = config(monkeypatch, ["--backend", f"{MODULE}:echo", *options, "--audio-rate", "16000"])
    backend = cfg.make_backend()
    assert isinstance(backend, EchoBackend) and backend.sample_rate == 16000
    got = sys.modules[MODULE].GOT[-1]
    assert got == plugins.BackendOptions(
        url="http://svc/", key="sk-plugin", ca_file="/etc/hostname", sample_rate=16000
    )
    assert "sk-plugin" not in repr(got)
    nested = config(monkeypatch, ["--backend", f"{MODULE}:Nested.make"]).make_backend()
    assert isinstance(nested, EchoBackend)
    refused = serve([*BASE, "--backend", f"{MODULE}:echo", "--realtime-session-file", "/x"])
    assert "Error: --realtime-session-file: cannot read /x" in refused.output


def test_backend_list_shows_the_built_ins_and_exits_0_without_the_other_options():
    for command, args in ((main, ["serve", "--backend", "list"]),
                          (rtcedge_cli.main, ["up", "--backend", "list"])):  # fmt: skip
        result = CliRunner().invoke(command, args, env={"RTCEDGE_KEYRING_JSON": None})
        assert result.exit_code == 0, result.output
        rows = {line.split()[0]: line for line in result.output.splitlines()}
        for name in ("echo", "websocket", "realtime", "media-streams"):
            assert rows[name].split()[1:] == ["built-in"]
        assert "MODULE:FACTORY" in result.output and plugins.ENTRY_POINT_GROUP in result.output


def test_an_entry_point_cannot_take_a_built_in_name_or_be_ambiguous(plugin_module, monkeypatch):
    def ep(name: str, value: str) -> EntryPoint:
        return EntryPoint(name, value, plugins.ENTRY_POINT_GROUP)

    registered = [ep("echo", f"{MODULE}:echo"), ep("twice", f"{MODULE}:echo"),
                  ep("twice", f"{MODULE}:refuses"), ep("gone", "rtcedge_test_broken:make"),
                  ep("fine", f"{MODULE}:echo")]  # fmt: skip
    monkeypatch.setattr(plugins, "_registered", lambda: registered)
    builtins = ("echo", "websocket")
    assert plugins.resolve("echo", builtins) is None  # the built-in wins
    assert plugins.resolve("fine", builtins) == f"{MODULE}:echo"
    with pytest.raises(plugins.PluginError, match="registered more than once"):
        plugins.resolve("twice", builtins)
    problems = {(a.name, a.source): a.problem for a in plugins.available(builtins)}
    assert problems[("echo", "built-in")] is None
    assert problems[("echo", f"plugin {MODULE}:echo from an unknown package")].startswith(
        "ignored: a built-in"
    )
    assert problems[("fine", f"plugin {MODULE}:echo from an unknown package")] is None
    assert "cannot import" in problems[("gone", "plugin rtcedge_test_broken:make from an "
                                                "unknown package")]  # fmt: skip
    listed = plugins.listing(builtins)
    assert "twice" in listed and "[cannot be used: registered more than once" in listed


# -- the example plugin, installed as a package -------------------------------------------------


@dataclass
class VenvTransceiver(TransceiverProcess):
    """``transceiver serve`` run by another interpreter (the plugin's venv)."""

    python: str = sys.executable

    def command(self) -> list[str]:
        return [self.python, *super().command()[1:]]


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory) -> Path:
    """The python of a fresh venv that sees this environment's packages and this checkout, with
    the example plugin built and installed into it by pip (offline, no build isolation)."""
    base = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(EXAMPLE, base / "src")  # the build writes beside the sources
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=60)  # fmt: skip
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    assert site != sysconfig.get_path("purelib")
    Path(site, "rtcedge-checkout.pth").write_text(f"{ROOT}\n")  # ahead of an installed rtcedge
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index",
                    "--no-build-isolation", "--no-deps", str(source)],
                   check=True, timeout=120)  # fmt: skip
    return python


def in_venv(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RTCEDGE_")}
    env["RTCEDGE_KEYRING_JSON"] = KEYRING
    return subprocess.run(
        [str(python), *args], env=env, capture_output=True, text=True, timeout=60, cwd="/"
    )


def test_an_installed_plugin_is_listed_with_its_package(plugin_venv):
    for command in (["transceiver", "serve"], ["rtcedge", "up"]):
        listed = in_venv(plugin_venv, "-m", *command, "--backend", "list")
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith("delay ")]
        assert "plugin rtcedge_delay:make_backend from rtcedge-delay 0.1.0" in row
        assert str(plugin_venv.parents[1]) in row  # where: the venv's site-packages
        assert "cannot be used" not in row
    outside = in_venv(Path(sys.executable), "-m", "transceiver", "serve", "--backend", "list")
    assert outside.returncode == 0 and "rtcedge_delay" not in outside.stdout
    refused = in_venv(plugin_venv, "-m", "transceiver", *BASE, "--backend", "delay",
                      "--backend-url", "ws://127.0.0.1:9/")  # fmt: skip
    assert refused.returncode == 2
    (error,) = [line for line in refused.stderr.splitlines() if line.startswith("Error")]
    assert error == ("Error: --backend: delay: rtcedge_delay:make_backend: the delay backend "
                     "takes no --backend-url, key or --audio-format opus")  # fmt: skip


def test_an_installed_plugin_answers_a_webrtc_caller_through_the_relay(plugin_venv):
    relay = RelayProcess({}, workers=1)
    trx = VenvTransceiver(relay, extra_args=["--backend", "delay"], python=str(plugin_venv))
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        call = run(run_client(trx.url, 440, seconds=2.5), 60)
        assert trx.metric("rtcedge_transceiver_backend_errors_total") == 0
    assert call.connected and not call.error, call
    # The plugin's audio: the caller's own tone, half a second (25 frames) late.
    assert call.frames_with_own_tone >= 25, call
    assert call.offer_to_first_echo_s - call.offer_to_connected_s >= 0.3, call
    # The plugin's events: what it heard, and the caller's event wrapped its way.
    assert {"type": "delay.event", "event": {"type": "hello", "hz": 440}} in call.events
    heard = [e["frames"] for e in call.events if e.get("type") == "delay.heard"]
    assert heard and heard[0] == 50, call.events
    assert not any(e.get("type") == "echo" for e in call.events)  # not the built-in echo
