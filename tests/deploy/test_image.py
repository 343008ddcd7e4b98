"""The image for real (issue 27): docs/deploy.md's own commands build the Dockerfile as it is and
push it (to a registry on loopback), and its one-host example serves a real call through a relay
container and a transceiver container, on the host network bound to a loopback address.

Needs root, a Docker daemon with BuildKit, the base image the Dockerfile names and Debian's
``docker-registry``: ``bash .ci/image`` provides them in CI (a daemon of its own, a base made from
Debian packages) and runs this file. Without them it skips, naming what is missing; with
``RTCEDGE_REQUIRE_IMAGE=1``, as ``.ci/image`` sets it, it fails instead, so CI cannot pass it by
skipping. It takes a minute or so (the build fetches the dependencies' wheels from PyPI), not
seconds: the build is the point.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from common.hint import Keyring
from common.lifetime import parent_death_preexec
from testbed.ports import free_port
from testbed.processes import metric_value
from tests.deploy.doc_examples import Example, example, run_shell
from tests.deploy.render import ROOT
from tests.deploy.test_live_services import healthcheck_command

# A label on every container this file starts, so that it removes exactly those.
LABEL = "io.rtcedge.test"


def base_image() -> str:
    """The Dockerfile's default PYTHON_IMAGE: the base the build needs locally."""
    (value,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    return value


def docker_client() -> str:
    """The client to run ``docker`` with: $RTCEDGE_DOCKER (.ci/image names docker.io's, which
    runs BuildKit without the buildx plugin a newer client would want) or the one on PATH."""
    return os.environ.get("RTCEDGE_DOCKER") or shutil.which("docker") or ""


def missing_requirement() -> str:
    """What this machine lacks for these tests, or "" when it has it all."""
    client = docker_client()
    if not client:
        return "no docker client"
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("docker-registry"):
        return "no docker-registry (Debian's package of that name)"
    info = subprocess.run(
        [client, "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=15,
    )
    if info.returncode != 0:
        return f"no Docker daemon answers ({info.stderr.strip()[:200]})"
    base = subprocess.run(
        [client, "image", "inspect", base_image()], capture_output=True, timeout=15
    )
    if base.returncode != 0:
        return f"the base image {base_image()} is not in the daemon"
    return ""


@pytest.fixture(scope="module")
def docker() -> str:
    missing = missing_requirement()
    if missing:
        message = f"{missing}: bash .ci/image sets up Docker and the base, and runs this file"
        if os.environ.get("RTCEDGE_REQUIRE_IMAGE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return docker_client()


@pytest.fixture(scope="module")
def shell_env(docker: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment the docs' commands run in: ``docker`` is that client, ``rtcedge`` this
    checkout's, BuildKit on (Docker 20.10 needs it said, as docs/deploy.md says)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "docker").symlink_to(docker)
    rtcedge = bin_dir / "rtcedge"
    rtcedge.write_text(f'#!/bin/sh\nexec {sys.executable} -m rtcedge "$@"\n')
    rtcedge.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "DOCKER_BUILDKIT": "1",
    }


def wait_http(url: str, timeout_s: float) -> tuple[int, str]:
    """(status, body) of ``url`` once it answers 200, or the last answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, str] = (0, "no answer")
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            last = (exc.code, exc.read().decode())
        except OSError as exc:
            last = (0, str(exc))
        time.sleep(0.2)
    return last


@pytest.fixture(scope="module")
def registry(docker: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A registry (Debian's docker-registry, distribution v2) on loopback: HOST:PORT. Docker
    pushes to 127.0.0.0/8 over plain HTTP without being told to."""
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{free_port(kind=socket.SOCK_STREAM)}"
    config = root / "config.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "version": 0.1,
                "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
                "http": {"addr": address},
            }
        )
    )
    with (root / "registry.log").open("wb") as log:
        proc = subprocess.Popen(
            [shutil.which("docker-registry") or "docker-registry", "serve", str(config)],
            stdout=log,
            stderr=log,
            preexec_fn=parent_death_preexec(),
        )
    try:
        status, body = wait_http(f"http://{address}/v2/", 20)
        assert status == 200, f"registry: {status} {body} {(root / 'registry.log').read_text()}"
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def image(docker: str, registry: str, shell_env: dict[str, str]) -> Iterator[str]:
    """The image, built and pushed by "The image"'s commands, with two changes: the registry is
    the one on loopback, and the build's RUN steps use the host's network (this daemon has no
    bridge, so that it changes nothing on the host)."""
    tag = f"{registry}/rtcedge:0.1.0"
    timings = {}
    for command in example("The image").commands():
        command = command.replace("registry.example/", f"{registry}/")
        command = command.replace("docker build ", "docker build --network host ")
        started = time.monotonic()
        result = run_shell(command, cwd=ROOT, env=shell_env, timeout_s=420)
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}{result.stderr[-5000:]}"
        timings[command.split()[1]] = time.monotonic() - started
    size = subprocess.run(
        [docker, "image", "inspect", "--format", "{{.Size}}", tag],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    print(
        f"\nimage {tag}: {int(size) / 1e6:.0f} MB, built in {timings['build']:.0f} s, "
        f"pushed in {timings['push']:.0f} s (docs/deploy.md's commands, Dockerfile as it is)"
    )
    try:
        yield tag
    finally:
        subprocess.run([docker, "image", "rm", "-f", tag], capture_output=True, timeout=60)


def inspect(docker: str, tag: str) -> dict:
    out = subprocess.run(
        [docker, "image", "inspect", tag], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return json.loads(out)[0]


def test_the_docs_commands_build_the_image_and_push_it(docker, image, registry):
    with urllib.request.urlopen(f"http://{registry}/v2/rtcedge/tags/list", timeout=5) as resp:
        assert json.load(resp)["tags"] == ["0.1.0"]
    config = inspect(docker, image)["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
    ).stdout.strip()
    assert labels["org.opencontainers.image.revision"] == head
    assert config["Healthcheck"]["Test"][0] == "CMD"


def test_both_services_and_keygen_run_from_the_image_as_uid_10001(docker, image):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [docker, "run", "--rm", "--network", "none", "--label", f"{LABEL}=basics", image,
             *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert run("id", "-u").stdout.strip() == "10001"
    assert "Usage: rtcedge" in run().stdout  # the default command
    for service in ("relay", "transceiver"):
        result = run(service, "serve", "--help")
        assert result.returncode == 0 and "--keyring" in result.stdout, result.stderr
    keyring = run("rtcedge", "keygen")  # the docs' other way to make the keyring
    assert keyring.returncode == 0, keyring.stderr
    assert Keyring.from_json(keyring.stdout).signing_key_id == 0


def service_of(docker: str, container_id: str) -> str:
    """What a container runs: the first word of its command (relay, transceiver)."""
    return subprocess.run(
        [docker, "container", "inspect", "--format", "{{index .Config.Cmd 0}}", container_id],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip()  # fmt: skip


def loopback_address() -> str:
    """A 127/8 address other than 127.0.0.1, with the one-host example's ports free on it: the
    example's ports are fixed, so this keeps it clear of anything else on loopback."""
    ports = [(3478, socket.SOCK_DGRAM), (4000, socket.SOCK_DGRAM), (4001, socket.SOCK_DGRAM),
             (5000, socket.SOCK_DGRAM), (8080, socket.SOCK_STREAM), (9478, socket.SOCK_STREAM),
             (9479, socket.SOCK_STREAM)]  # fmt: skip
    for _ in range(20):
        address = f"127.{random.randint(64, 254)}.{random.randint(1, 254)}.{random.randint(1, 254)}"
        try:
            for port, kind in ports:
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind((address, port))
            return address
        except OSError:
            continue
    raise RuntimeError("no loopback address with the example's ports free")


def one_host_commands(doc: Example, image: str, address: str, run_id: str, wildcards: dict) -> str:
    """The example as the test runs it: both of the docs' addresses are ``address``, the relay
    lets loopback callers in (as the docs say to do on one machine), the image's wildcard
    listeners not set by the example are bound to ``address`` too, and every container is
    labelled."""
    lines = []
    for line in doc.commands():
        line = line.replace("10.0.0.5", address).replace("203.0.113.5", address)
        if line.startswith("docker run -d "):
            extra = [f"--label {LABEL}={run_id}"]
            given = set(re.findall(r"-e (RTCEDGE_\w+)=", line))
            extra += [f"-e {var}={value}" for var, value in wildcards.items() if var not in given]
            if " relay serve " in line:
                extra.append("-e RTCEDGE_ALLOW_NETWORKS=127.0.0.0/8")
            line = line.replace("docker run -d ", f"docker run -d {' '.join(extra)} ", 1)
        lines.append(line.replace("IMAGE", image))
    return "\n".join(lines)


def test_the_one_host_example_serves_a_call_through_both_containers(
    docker, image, shell_env, tmp_path
):
    doc = example("The image", 1)
    address = loopback_address()
    run_id = f"{os.getpid()}-{address}"
    env_of_image = dict(e.split("=", 1) for e in inspect(docker, image)["Config"]["Env"])
    wildcards = {
        var: value.replace("0.0.0.0", address)
        for var, value in env_of_image.items()
        if var.startswith("RTCEDGE_") and value.startswith("0.0.0.0:")
    }
    commands = one_host_commands(doc, image, address, run_id, wildcards)
    containers: list[str] = []

    def labelled() -> list[str]:
        return subprocess.run(
            [docker, "ps", "-aq", "--filter", f"label={LABEL}={run_id}"],
            capture_output=True, text=True, timeout=30,
        ).stdout.split()  # fmt: skip

    def logs() -> str:
        return "\n".join(
            subprocess.run([docker, "logs", c], capture_output=True, text=True, timeout=30).stderr
            for c in containers
        )

    try:
        result = run_shell(commands, cwd=tmp_path, env=shell_env, timeout_s=120)
        containers = labelled()
        assert result.returncode == 0, commands + "\n" + result.stderr
        relay_status, _ = wait_http(f"http://{address}:9478/readyz", 30)
        trx_status, _ = wait_http(f"http://{address}:8080/readyz", 30)
        assert (relay_status, trx_status) == (200, 200), logs()
        assert wait_http(f"http://{address}:9479/metrics", 5)[0] == 200, logs()

        call = subprocess.run(
            [sys.executable, "-m", "tests.support.tone_call", "--url", f"http://{address}:8080",
             "--hz", "440", "--seconds", "1.5"],
            capture_output=True, text=True, timeout=90, cwd=ROOT, env=shell_env,
        )  # fmt: skip
        assert call.returncode == 0, call.stderr[-3000:] + logs()
        heard = json.loads(call.stdout.strip().splitlines()[-1])
        assert heard["connected"] and not heard["error"], (heard, logs())
        assert heard["remote_candidate"] == f"{address}:3478"  # media went to the relay
        assert heard["frames_with_own_tone"] >= heard["frames_expected"] // 2, heard

        # The image's HEALTHCHECK, in each container: its own service's port, not the other's.
        check = healthcheck_command()
        services = {service_of(docker, c): c for c in containers}
        assert sorted(services) == ["relay", "transceiver"]
        for container_id in services.values():
            health = subprocess.run([docker, "exec", container_id, *check], timeout=30)
            assert health.returncode == 0, logs()
        closed = [docker, "exec", "-e", f"RTCEDGE_METRICS={address}:1", services["relay"]]
        assert subprocess.run([*closed, *check], timeout=30).returncode == 1

        _, metrics = wait_http(f"http://{address}:9478/metrics", 5)
        assert metric_value(metrics, "rtcedge_relay_packets_total", peer="transceiver") > 0
        denied = metric_value(
            metrics, "rtcedge_relay_dropped_packets_total", reason="denied_address"
        )
        assert denied == 0
        assert "--relay-network is not set" not in logs()  # the transceiver trusts the relay only
    finally:
        if started := labelled():  # also those of a shell that timed out half-way
            subprocess.run([docker, "rm", "-f", *started], capture_output=True, timeout=60)
