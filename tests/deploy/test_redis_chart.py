"""The in-chart Redis as its pod would run it: the rendered command, arguments, environment and
readiness probe, executed against the real ``redis-server``/``redis-cli`` on loopback (Debian's
/bin/sh is dash; the image's is busybox ash: both hand a here-document over a pipe)."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

from testbed.ports import free_port
from tests.deploy.render import PUBLIC, container, env_of, merge, one, render, workload


@pytest.fixture
def chart_redis():
    """The rendered Redis container started locally (bound to loopback), with its password."""
    port = free_port(kind=socket.SOCK_STREAM)
    objects = render(merge(PUBLIC, {"redis": {"enabled": True, "port": port}}))
    secret = one(objects, "Secret", "rtcedge-redis")
    password = base64.b64decode(secret["data"]["password"]).decode()
    pod = workload(objects, "redis")
    c = container(pod)
    ref = env_of(pod)["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "rtcedge-redis", "key": "password"}
    env = {"PATH": os.environ["PATH"], "REDISCLI_AUTH": password}  # what the kubelet sets
    proc = subprocess.Popen(
        [*c["command"], *c["args"], "--bind", "127.0.0.1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc, port, password, c["readinessProbe"]["exec"]["command"], env
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def _until_up(port: int, password: str) -> redis.Redis:
    client = redis.Redis(
        host="127.0.0.1", port=port, password=password, socket_timeout=1, retry=None
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return client
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_in_chart_redis_requires_the_generated_password(chart_redis):
    proc, port, password, _probe, _env = chart_redis
    assert _until_up(port, password).set("k", "v")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, retry=None).get("k")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=port, password="guess", retry=None).get("k")
    # The password is on no command line: not the shell's, not redis-server's.
    for pid in (proc.pid, *_children(proc.pid)):
        assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


def test_the_readiness_probe_authenticates_and_fails_without(chart_redis):
    _, port, password, probe, env = chart_redis
    _until_up(port, password)
    assert subprocess.run(probe, env=env, capture_output=True, timeout=10).returncode == 0
    wrong = {**env, "REDISCLI_AUTH": "guess"}
    assert subprocess.run(probe, env=wrong, capture_output=True, timeout=10).returncode != 0
    without = {"PATH": env["PATH"]}
    assert subprocess.run(probe, env=without, capture_output=True, timeout=10).returncode != 0


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []
