"""A real relay and transceiver on loopback, seen as the chart and the image see them.

One call goes through them first, so that labelled series exist. Then: ``promtool check metrics``
on both ``/metrics``; the Grafana dashboard's queries checked by ``promtool check rules`` and
against the metric names the services really export; the image's HEALTHCHECK command run
against both services.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess
from tests.deploy.paths import CHART, ROOT

DASHBOARD = json.loads((CHART / "dashboards" / "rtcedge.json").read_text())
METRIC = re.compile(r"\brtcedge_[a-z0-9_]+")


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: apt-get install -y prometheus (CI installs it)"
    return path


@pytest.fixture(scope="module")
def stack():
    # With ICE over TCP: its series are checked too, and the answer's passive TCP candidate
    # must not disturb an aiortc client (which has no ICE-TCP: it pairs only UDP).
    relay = RelayProcess({}, workers=2, pin=False, tcp=True)
    trx = TransceiverProcess(relay)
    relay.transceivers = {0: trx.media_address}  # the allowlist, once the media port is known
    with relay, trx:
        call = subprocess.run(
            [sys.executable, "-m", "tests.support.tone_call", "--url", trx.url, "--hz", "440",
             "--seconds", "1"],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        assert call.returncode == 0, call.stderr[-2000:]
        request = urllib.request.Request(f"{trx.url}/whip", data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError):  # 415: a labelled error series
            urllib.request.urlopen(request, timeout=5)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"\x80" + bytes(20), relay.address)  # RTP from nobody: a drop reason
            s.sendto(b"\x80" + bytes(20), trx.media_address)  # and one for the demultiplexer
        yield relay, trx


def metrics_of(stack) -> dict[str, str]:
    relay, trx = stack
    texts = {
        "relay": relay.http("/metrics"),
        "transceiver": trx.http("/metrics", port=trx.metrics_port),
    }
    for name, (status, _) in texts.items():
        assert status == 200, name
    return {name: text for name, (_, text) in texts.items()}


@pytest.mark.parametrize("service", ["relay", "transceiver"])
def test_promtool_accepts_the_metrics(stack, service):
    text = metrics_of(stack)[service]
    assert f"rtcedge_{service}_" in text
    result = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def dashboard_queries() -> list[str]:
    return [
        target["expr"] for panel in DASHBOARD["panels"] for target in panel.get("targets", [])
    ] + [var["query"]["query"] for var in DASHBOARD["templating"]["list"] if var["type"] == "query"]


def test_dashboard_queries_are_valid_promql(tmp_path: Path):
    """promtool parses each query as a recording rule (Grafana's variables filled in)."""
    rules = []
    for i, expr in enumerate(dashboard_queries()):
        if expr.startswith("label_values("):  # a Grafana function, not PromQL
            continue
        expr = expr.replace("$__rate_interval", "1m").replace("$namespace", ".*")
        rules.append({"record": f"rtcedge:dashboard_query_{i}", "expr": expr})
    path = tmp_path / "rules.yaml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_dashboard_covers_exactly_what_the_services_export(stack):
    texts = metrics_of(stack)
    types = {
        line.split()[2]: line.split()[3]
        for text in texts.values()
        for line in text.splitlines()
        if line.startswith("# TYPE")
    }
    families = {f for f in types if not f.endswith("_created")}  # client-library extras
    # Sample names, also of families that have no series yet (a labelled counter never used).
    names = {
        line.split("{")[0].split(" ")[0]
        for text in texts.values()
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    for family, kind in types.items():
        names |= (
            {f"{family}{s}" for s in ("_bucket", "_sum", "_count")}
            if kind == "histogram"
            else {family if family.endswith("_total") or kind != "counter" else f"{family}_total"}
        )
    used = {m for q in dashboard_queries() for m in METRIC.findall(q)}
    unknown = used - names
    assert not unknown, f"dashboard queries metrics nobody exports: {sorted(unknown)}"
    missing = {f for f in families if not any(u == f or u.startswith(f + "_") for u in used)}
    assert not missing, f"exported but not on the dashboard: {sorted(missing)}"


def test_dashboard_rates_counters_and_takes_quantiles_of_histograms():
    for expr in dashboard_queries():
        for name in METRIC.findall(expr):
            if name.endswith("_total"):
                assert re.search(rf"\b(rate|increase)\({name}\b", expr), expr
            if name.endswith("_bucket"):
                assert expr.startswith("histogram_quantile("), expr
                assert re.search(rf"\brate\({name}\b", expr), expr


def healthcheck_command() -> list[str]:
    """The exec form of the Dockerfile's HEALTHCHECK CMD (JSON, as Docker reads it)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("HEALTHCHECK")]
    return json.loads(line[line.index("CMD") + 3 :])


def test_image_healthcheck_answers_for_either_service(stack):
    relay, trx = stack
    cmd = healthcheck_command()
    assert cmd[0] == "python"
    run = [sys.executable, *cmd[1:]]
    closed = f"127.0.0.1:{free_port(kind=socket.SOCK_STREAM)}"

    def status(env: dict[str, str]) -> int:
        return subprocess.run(run, env=env, timeout=30).returncode

    # The image sets both variables; only the service the command started answers.
    assert (
        status({"RTCEDGE_METRICS": f"127.0.0.1:{relay.metrics_port}", "RTCEDGE_HTTP": closed}) == 0
    )
    assert status({"RTCEDGE_HTTP": f"127.0.0.1:{trx.http_port}", "RTCEDGE_METRICS": closed}) == 0
    assert status({"RTCEDGE_HTTP": closed, "RTCEDGE_METRICS": closed}) == 1
    assert status({"RTCEDGE_METRICS": "off"}) == 1
