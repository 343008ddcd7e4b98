"""docs/deploy.md's examples, run: every one is taken by a test (the image's by test_image.py,
which needs Docker), and the cluster's run here as written, in bash, with the helm and kubectl
of tests/deploy/cluster_standin.py (Helm's own engine, the real option parsers, the names of
the objects checked), so that a misspelt flag, value or name in the docs fails."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.hint import Keyring
from tests.deploy.cluster_standin import transceiver_pod_config
from tests.deploy.doc_examples import example, examples, run_shell
from tests.deploy.render import (
    PUBLIC,
    ROOT,
    find,
    merge,
    one,
    render,
    workload,
)
from tests.support.certificates import certificates

HERE = Path(__file__).resolve().parent


def test_every_deploy_example_is_run_by_a_test():
    taken = set()
    for source in HERE.glob("test_*.py"):
        for section, index in re.findall(
            r'example\(\s*"([^"]+)"(?:\s*,\s*(\d+))?\s*\)', source.read_text()
        ):
            taken.add(f"{section} #{index or 0}")
    names = [e.name for e in examples()]
    assert len(names) >= 6  # the image's two, Install, the backend, autoscaling, the key
    assert sorted(set(names) - taken) == [], "examples of docs/deploy.md no test runs"


class Cluster:
    """A working directory holding the chart (as a checkout does), with ``helm`` and ``kubectl``
    the stand-in's and ``rtcedge`` this checkout's."""

    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path / "work"
        self.cwd.mkdir()
        (self.cwd / "helm").symlink_to(ROOT / "helm")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool, module in (
            ("helm", "tests.deploy.cluster_standin helm"),
            ("kubectl", "tests.deploy.cluster_standin kubectl"),
            ("rtcedge", "rtcedge"),
        ):
            script = bin_dir / tool
            script.write_text(f'#!/bin/sh\nexec {sys.executable} -m {module} "$@"\n')
            script.chmod(0o755)
        self.state_path = tmp_path / "cluster.json"
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
            "RTCEDGE_CLUSTER_STANDIN": str(self.state_path),
        }

    def run(self, text: str) -> str:
        result = run_shell(text, cwd=self.cwd, env=self.env, timeout_s=120)
        assert result.returncode == 0, f"{text}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
        return result.stdout

    def fails(self, text: str) -> str:
        result = run_shell(text, cwd=self.cwd, env=self.env, timeout_s=120)
        assert result.returncode != 0, text
        return result.stderr

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())

    def objects(self, release: str = "rtcedge") -> list[dict[str, Any]]:
        return self.state()["releases"][release]["objects"]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def install_commands() -> list[str]:
    """The Install example's ``helm install`` commands: alternatives, each its own release."""
    return [c for c in example("Install").commands() if c.startswith("helm install ")]


@pytest.mark.parametrize("index", [0, 1], ids=["loadBalancer", "hostNetwork"])
def test_install_examples_install_a_release_the_services_accept(cluster, index):
    command = install_commands()[index]
    assert "NAME: rtcedge" in cluster.run(command)
    objects = cluster.objects()
    relay = workload(objects, "relay")
    assert relay["kind"] == ("Deployment", "DaemonSet")[index]
    pod = relay["spec"]["template"]["spec"]
    assert bool(pod.get("hostNetwork")) == (index == 1)
    assert len(install_commands()) == 2


def test_install_refuses_what_helm_would(cluster):
    """The stand-in is not lenient: a misspelt value, an unknown flag, a second install."""
    command = install_commands()[0]
    assert "'publicAdress' not allowed" in cluster.fails(
        command.replace("relay.publicAddress", "relay.publicAdress")
    )
    assert "unknown flag" in cluster.fails(command.replace("--create-namespace", "--create-ns"))
    cluster.run(command)
    assert "cannot re-use a name" in cluster.fails(command)


def test_backend_example_gives_the_transceivers_its_url_key_and_ca(cluster, monkeypatch, tmp_path):
    cluster.run(install_commands()[0])
    (cluster.cwd / "inference.key").write_text("sk-inference-0123456789abcdef")
    ca = certificates(tmp_path)["ca"].read_text()
    (cluster.cwd / "inference-ca.pem").write_text(ca)
    cluster.run(example("The backend (`transceiver.backend*`)").text)
    state = cluster.state()
    assert state["releases"]["rtcedge"]["revision"] == 2
    config = transceiver_pod_config(cluster.objects(), state["created"], monkeypatch, tmp_path)
    assert config.backend == "websocket"
    assert config.backend_url == "wss://inference.ai.svc.cluster.local:8765/call"
    assert config.backend_key == "sk-inference-0123456789abcdef"  # the file kubectl took
    assert Path(config.backend_ca_file).read_text() == ca


def test_backend_example_without_its_secret_would_leave_the_pods_pending(cluster):
    cluster.run(install_commands()[0])
    (cluster.cwd / "inference-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    without = [
        c
        for c in example("The backend (`transceiver.backend*`)").commands()
        if not c.startswith("kubectl -n voice create secret")
    ]
    assert 'Secret "inference-key" not found' in cluster.fails("\n".join(without))


def test_autoscaling_values_render_an_autoscaler_of_the_transceivers():
    values = yaml.safe_load(example("Autoscaling (`transceiver.autoscaling`)").text)
    objects = render(merge(PUBLIC, values))
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
    assert "replicas" not in workload(objects, "transceiver")["spec"]
    assert not find(objects, "ScaledObject")


def keyring_of(objects: list[dict[str, Any]]) -> Keyring:
    secret = one(objects, "Secret", "rtcedge-keyring")
    return Keyring.from_json(base64.b64decode(secret["data"]["keyring.json"]).decode())


def test_key_rotation_example_moves_signing_to_key_1_after_every_relay_knows_it(cluster):
    cluster.run(install_commands()[0])
    first = keyring_of(cluster.objects())
    cluster.run(example("Rotate the hint key").text)
    step1 = Keyring.from_json((cluster.cwd / "step1.json").read_text())
    assert step1.signing_key_id == 0 and set(step1.keys) == {0, 1}
    assert step1.keys[0] == first.keys[0]
    final = keyring_of(cluster.objects())
    assert final.signing_key_id == 1 and final.keys == step1.keys
    log = cluster.state()["log"]
    hups = [c for c in log if c[:1] == ["kubectl"] and "exec" in c]
    assert hups and all(c[-3:] == ["sh", "-c", "kill -HUP 1"] for c in hups)
    assert all("relay" in c[c.index("exec") + 1] for c in hups)
    assert [
        "kubectl",
        "-n",
        "voice",
        "rollout",
        "restart",
        "statefulset/rtcedge-transceiver",
    ] in log
