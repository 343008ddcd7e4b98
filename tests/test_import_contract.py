"""Dependencies point one way: common <- relay, transceiver <- testbed <- bench <- rtcedge
(pyproject.toml [tool.importlinter], checked by lint-imports as .ci/run runs it). A backwards
import, even one inside a function, breaks the contract; the light commands load no WebRTC stack.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.hint import Keyring

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rtcedge", "bench", "testbed", "relay", "transceiver", "common", "tests", "fuzz")
WEBRTC = {"aiortc", "av", "aioice"}  # what the transceiver's sessions and the benchmarks load


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on ``tree``, which it reads from its working directory."""
    binary = shutil.which("lint-imports")
    assert binary, "lint-imports is missing: pip install -e '.[test]' (import-linter)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [binary, "--no-cache", "--no-logo"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_the_tree(dest: Path) -> Path:
    """The Python files of every package the contract names, and pyproject.toml."""

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n == "__pycache__" or (not n.endswith(".py") and not Path(folder, n).is_dir())
        ]

    for package in PACKAGES:
        shutil.copytree(ROOT / package, dest / package, ignore=not_python)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_tree_keeps_the_contract():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


LAZY = "\n\ndef _backwards() -> None:\n    {statement}  # inside a function: imported when called\n"


@pytest.mark.parametrize(
    ("module", "statement"),
    [
        ("transceiver/server.py", "from relay import mmsg"),  # the services are independent
        ("relay/worker.py", "from transceiver.socket import demux"),
        ("common/sockets.py", "from testbed.ports import free_port"),  # below, never above
        ("testbed/processes.py", "from rtcedge import cli"),
        ("testbed/processes.py", "from bench.harness import stats"),  # no benchmark below bench
        ("relay/config.py", "from tests.support import waits"),  # forbidden: tests, fuzzers
        ("rtcedge/cli.py", "from fuzz import harness"),
    ],
)
def test_a_backwards_import_breaks_the_contract(tmp_path, module, statement):
    tree = copy_of_the_tree(tmp_path)
    with (tree / module).open("a") as f:
        f.write(LAZY.format(statement=statement))
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    importer, imported = module.removesuffix(".py").replace("/", "."), statement.split()[1]
    top = importer.partition(".")[0], imported.partition(".")[0]
    assert f"{top[0]} is not allowed to import {top[1]}" in result.stdout, result.stdout
    assert f"{importer} -> {imported}" in result.stdout, "the import is named"


def modules_loaded_by(module: str, args: list[str]) -> tuple[set[str], str]:
    """The modules (full names) imported by ``module``'s command line run with ``args`` in a
    fresh interpreter, and what it printed."""
    probe = (
        "import sys\n"
        f"from {module} import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "finally:\n"
        "    print('\\nloaded:', *sorted(sys.modules), flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    printed, _, loaded = result.stdout.rpartition("\nloaded: ")
    return set(loaded.split()), printed


def packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


# `rtcedge up` takes the transceiver's own declarations of its codec and HTTPS options (each
# option declared once): these light modules, and nothing else of the transceiver, load with it.
UP_OPTION_MODULES = {
    "transceiver",
    "transceiver.call",
    "transceiver.call.libopus",
    "transceiver.codec_options",
    "transceiver.https_options",
}


def test_rtcedge_keygen_and_help_load_no_webrtc_stack_and_no_benchmarks():
    loaded, printed = modules_loaded_by("rtcedge.cli", ["keygen", "--key-id", "3"])
    assert Keyring.from_json(printed).signing_key_id == 3
    assert not packages(loaded) & (WEBRTC | {"bench", "testbed", "relay"}), loaded
    assert {m for m in loaded if packages({m}) == {"transceiver"}} <= UP_OPTION_MODULES, loaded
    loaded, printed = modules_loaded_by("rtcedge.cli", ["--help"])
    assert "keygen" in printed and "up" in printed and "bench" in printed
    assert not packages(loaded) & (WEBRTC | {"bench", "testbed"}), loaded


def test_relay_serve_help_loads_no_webrtc_stack():
    loaded, printed = modules_loaded_by("relay.cli", ["serve", "--help"])
    assert "--listen" in printed
    assert not packages(loaded) & (WEBRTC | {"bench", "testbed", "transceiver", "rtcedge"}), loaded
