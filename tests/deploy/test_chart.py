"""helm/rtcedge rendered offline by Helm's engine: lint, the objects each mode makes, and the
command lines the pods would run, parsed by the real ``relay serve`` / ``transceiver serve``."""

from __future__ import annotations

import base64
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("helm_python", reason="the deploy extra: pip install -e '.[deploy]'")

import helm_python as helm

from common.hint import Keyring
from relay import cli as relay_cli
from tests.deploy.render import (
    CHART,
    CI_VALUES,
    MONITORING,
    NAMESPACE,
    PUBLIC,
    ci_values,
    container,
    env_of,
    expand,
    find,
    merge,
    notes,
    one,
    render,
    resolve_env,
    workload,
)
from transceiver import cli as transceiver_cli

CI_NAMES = [p.name.removesuffix("-values.yaml") for p in CI_VALUES]
SAMPLE_POD_IP = {"IPv4": "10.1.2.3", "IPv6": "fd00::1:2:3"}


def test_every_mode_has_a_ci_values_file():
    modes = {ci_values(n).get("relay", {}).get("mode", "loadBalancer") for n in CI_NAMES}
    assert modes == {"hostNetwork", "hostPort", "loadBalancer"}
    assert any(ci_values(n).get("redis", {}).get("enabled") for n in CI_NAMES)
    assert any(not ci_values(n).get("redis", {}).get("enabled") for n in CI_NAMES)


@pytest.mark.parametrize("name", CI_NAMES)
@pytest.mark.parametrize("kube_version", ["v1.28.0", "v1.36.0"])
def test_chart_lints_without_warnings(name, kube_version):
    report = helm.lint(
        CHART, ci_values(name), strict=True, namespace=NAMESPACE, kube_version=kube_version
    )
    assert not report["errors"], report
    # severity: 1 info (e.g. "icon is recommended"), 2 warning, 3 error
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems, problems


@pytest.mark.parametrize("name", CI_NAMES)
def test_service_monitors_only_with_the_prometheus_operator(name):
    without = render(ci_values(name))
    with_crds = render(ci_values(name), api_versions=(MONITORING,))
    assert not find(without, "ServiceMonitor")
    monitors = find(with_crds, "ServiceMonitor")
    assert sorted(m["metadata"]["name"] for m in monitors) == [
        "rtcedge-relay",
        "rtcedge-transceiver",
    ]
    switched_off = merge(ci_values(name), {"metrics": {"serviceMonitor": {"enabled": False}}})
    assert not find(render(switched_off, api_versions=(MONITORING,)), "ServiceMonitor")
    # Each selects exactly one Service: the one carrying that component's metrics port.
    services = find(with_crds, "Service")
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        port = monitor["spec"]["endpoints"][0]["port"]
        chosen = [
            s
            for s in services
            if wanted.items() <= s["metadata"]["labels"].items()
            and port in {p["name"] for p in s["spec"]["ports"]}
        ]
        assert len(chosen) == 1, (monitor["metadata"]["name"], chosen)


@pytest.mark.parametrize("name", CI_NAMES)
def test_every_object_is_in_the_release_namespace(name):
    for obj in render(ci_values(name), api_versions=(MONITORING,)):
        assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


# ---- the command lines, as the pods would run them ----


@pytest.mark.parametrize("name", CI_NAMES)
def test_relay_command_line_is_accepted_by_relay_serve(name, monkeypatch):
    values = ci_values(name)
    objects = render(values)
    relay = workload(objects, "relay")
    c = container(relay)
    family = values.get("ipFamily", "IPv4")
    env = resolve_env(relay, SAMPLE_POD_IP[family], monkeypatch)
    assert c["command"] == ["relay", "serve"]
    args = expand(c["args"], env)
    serve = relay_cli.main.commands["serve"]
    ctx = serve.make_context("serve", list(args))
    config = relay_cli.build_config(ctx.params)

    assert config.internal_host == SAMPLE_POD_IP[family]  # the pod IP, via the downward API
    assert config.internal_port_base == 4000
    assert config.listen[1] == values["relay"].get("port", 3478)
    assert config.listen[0] in ("0.0.0.0", "::")
    assert config.keyring_path == "/secrets/keyring.json"
    # Metrics on the pod IP (the node's internal address on hostNetwork), never 0.0.0.0.
    assert config.metrics == (SAMPLE_POD_IP[family], 9478)
    replicas = values.get("transceiver", {}).get("replicas", 2)
    wanted_ids = values["relay"].get("transceiverIds") or f"0-{replicas - 1}"
    assert ctx.params["transceiver_ids"] == wanted_ids
    assert config.transceiver_dns == (
        "rtcedge-transceiver-{id}.rtcedge-transceiver-headless.voice.svc.cluster.local:5000"
    )
    assert config.max_hint_age_s == 14400 + 60  # the maximum session age plus a minute
    assert (config.dns_interval_s, config.dns_grace_s) == (10, 60)
    # Redis is wired through the environment only: never as a flag the relay may not know.
    assert not any(a.startswith("--redis") for a in args)


@pytest.mark.parametrize("name", CI_NAMES)
def test_transceiver_command_line_is_accepted_by_transceiver_serve(name, monkeypatch):
    values = ci_values(name)
    trx = workload(render(values), "transceiver")
    c = container(trx)
    env = resolve_env(trx, "10.9.9.9", monkeypatch)
    args = expand(c["args"], env)
    if c["command"][0] == "/bin/sh":
        args = ["--id", "1", *args]  # what the wrapper adds (test_transceiver_id_from_pod_name)
    else:
        assert env["RTCEDGE_TRANSCEIVER_ID"] == "1"
    ctx = transceiver_cli.main.commands["serve"].make_context("serve", list(args))
    config = transceiver_cli.build_config(ctx.params)
    assert config.transceiver_id == 1
    host, port = config.advertise
    wanted = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    assert wanted == values["relay"]["publicAddress"]
    assert config.media[1] == 5000 and config.http[1] == 8080
    assert config.keyring_path == "/secrets/keyring.json"
    assert config.relay_networks == relay_networks_of(values)
    assert config.relay_networks, "never any source"
    # A session request landing on another pod is passed on to its owner's WHIP port, named
    # through the headless Service (which publishes the http port, not-ready pods included).
    name, headless = trx["metadata"]["name"], trx["spec"]["serviceName"]
    owner = f"{name}-2.{headless}.{NAMESPACE}.svc.cluster.local"
    assert config.peers().address(2) == (owner, config.http[1])
    service = one(render(values), "Service", headless)
    assert {"name": "http", "protocol": "TCP", "port": 8080, "targetPort": "http"} in (
        service["spec"]["ports"]
    )
    spec = trx["spec"]["template"]["spec"]
    preStop = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert spec["terminationGracePeriodSeconds"] > config.drain_grace_s + preStop


def relay_networks_of(values: dict) -> tuple[str, ...]:
    """What the transceivers must trust: the relays' pod CIDRs, plus the nodes' on hostNetwork."""
    nets = list(values.get("transceiver", {}).get("relayNetworks", ()))
    if values["relay"].get("mode") == "hostNetwork":
        nets = values.get("networkPolicy", {}).get("relayNodeCIDRs", []) + nets
    return tuple(dict.fromkeys(nets))


def test_host_network_relays_are_the_only_senders_the_transceivers_trust():
    """Finding 6: the relay nodes' CIDRs (required for the NetworkPolicy) reach --relay-network."""
    values = ci_values("hostnetwork")
    assert not values.get("transceiver", {}).get("relayNetworks")
    args = container(workload(render(values), "transceiver"))["args"]
    assert [a for a in args if a.startswith("--relay-network")] == ["--relay-network=192.0.2.0/24"]
    both = merge(values, {"transceiver": {"relayNetworks": ["192.0.2.0/24", "10.244.0.0/16"]}})
    args = container(workload(render(both), "transceiver"))["args"]
    assert [a for a in args if a.startswith("--relay-network")] == [
        "--relay-network=192.0.2.0/24",
        "--relay-network=10.244.0.0/16",
    ]


NO_RELAY_NETWORKS = {"transceiver": {"relayNetworks": []}}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # Relays are pods: their pod CIDR must be named.
        (NO_RELAY_NETWORKS, "transceiver.relayNetworks is required in relay.mode=loadBalancer"),
        (
            merge(NO_RELAY_NETWORKS, {"relay": {"mode": "hostPort"}}),
            "transceiver.relayNetworks is required in relay.mode=hostPort",
        ),
        # hostNetwork without a NetworkPolicy (the schema asks for the node CIDRs only with one).
        (
            merge(
                NO_RELAY_NETWORKS,
                {"relay": {"mode": "hostNetwork"}, "networkPolicy": {"enabled": False}},
            ),
            "networkPolicy.relayNodeCIDRs (or transceiver.relayNetworks) is required in "
            "relay.mode=hostNetwork",
        ),
        ({"transceiver": {"relayNetworks": ["0.0.0.0/0"]}}, "0.0.0.0/0 is every address"),
        (
            {"ipFamily": "IPv6", "transceiver": {"relayNetworks": ["::/0"]}},
            "::/0 is every address",
        ),
    ],
)
def test_a_release_whose_transceivers_trust_any_sender_is_refused(override, message):
    """Finding 6: no rendered chart lets the media port take encapsulated datagrams from anyone."""
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(merge(PUBLIC, override))


@pytest.mark.parametrize("name", CI_NAMES)
def test_metrics_listen_on_the_pod_ip_and_probes_still_reach_them(name, monkeypatch):
    """Finding 8: relay and transceiver /metrics bound to the pod IP (status.podIP: the node's
    own address for a hostNetwork pod), which is where the kubelet's probes connect."""
    values = ci_values(name)
    family = values.get("ipFamily", "IPv4")
    pod_ip = SAMPLE_POD_IP[family]
    objects = render(values)
    for component in ("relay", "transceiver"):
        obj = workload(objects, component)
        c = container(obj)
        assert env_of(obj)["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        for probe in (c["livenessProbe"], c["readinessProbe"]):
            assert "host" not in probe["httpGet"]  # the kubelet connects to the pod IP
    trx = workload(objects, "transceiver")
    env = resolve_env(trx, pod_ip, monkeypatch)
    wanted = f"[{pod_ip}]:9479" if family == "IPv6" else f"{pod_ip}:9479"
    assert env["RTCEDGE_METRICS"] == wanted
    ports = {p["name"]: p for p in container(trx)["ports"]}
    assert ports["metrics"] == {"name": "metrics", "containerPort": 9479, "protocol": "TCP"}
    assert not any("metrics" in a for a in container(trx)["args"])
    # Once the transceiver knows --metrics, its parser reads it from RTCEDGE_METRICS.
    params = (
        transceiver_cli.main.commands["serve"]
        .make_context("serve", ["--id", "1", *expand(container(trx)["args"], env)])
        .params
    )
    if "metrics" in params:
        assert params["metrics"] == wanted


def test_scrapes_reach_the_transceivers_metrics_port_not_the_http_one():
    objects = render(PUBLIC, api_versions=(MONITORING,))
    monitor = one(objects, "ServiceMonitor", "rtcedge-transceiver")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    headless = one(objects, "Service", "rtcedge-transceiver-headless")
    assert headless["metadata"]["labels"]["rtcedge.io/metrics"] == "true"
    by_name = {p["name"]: p for p in headless["spec"]["ports"]}
    assert by_name["metrics"] == {
        "name": "metrics", "protocol": "TCP", "port": 9479, "targetPort": "metrics"
    }  # fmt: skip


def _routes(path: str, rule_path: str, path_type: str) -> bool:
    """Does an Ingress path rule send ``path`` to its backend? Kubernetes' Prefix matches whole
    path elements; ImplementationSpecific is taken as a string prefix (what nginx does)."""
    if path_type == "Exact":
        return path == rule_path
    if path_type == "Prefix":
        prefix = rule_path.rstrip("/")
        return path == prefix or path.startswith(prefix + "/")
    return path.startswith(rule_path)


def test_the_ingress_routes_whip_and_the_page_never_metrics():
    """Finding 8: the Ingress reaches only the HTTP port, and only its WHIP and page paths."""
    objects = render(ci_values("hostport-redis"))
    ingress = one(objects, "Ingress", "rtcedge-transceiver")
    service = one(objects, "Service", "rtcedge-transceiver")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert {p["backend"]["service"]["name"] for p in paths} == {"rtcedge-transceiver"}
    assert {p["backend"]["service"]["port"]["name"] for p in paths} == {"http"}

    def routed(path: str) -> bool:
        return any(_routes(path, p["path"], p["pathType"]) for p in paths)

    for public in ("/whip", "/whip/0123abcd", "/", "/static/app.js", "/static/style.css"):
        assert routed(public), public
    for private in ("/metrics", "/healthz", "/readyz"):
        assert not routed(private), private


@pytest.mark.parametrize(
    ("path", "path_type"),
    [
        ("/", "Prefix"),
        ("/metrics", "Exact"),
        ("/metrics/", "Prefix"),
        ("/met", "ImplementationSpecific"),
        ("/healthz", "Prefix"),
    ],
)
def test_an_ingress_path_that_would_publish_metrics_is_refused(path, path_type):
    values = merge(
        PUBLIC,
        {"transceiver": {"ingress": {"enabled": True, "hosts": [
            {"host": "whip.example.com", "paths": [{"path": path, "pathType": path_type}]}
        ]}}},
    )  # fmt: skip
    with pytest.raises(helm.HelmError, match="would publish /metrics"):
        render(values)


def test_transceiver_id_from_pod_name(tmp_path: Path):
    """The StatefulSet ordinal becomes --id, in the image's POSIX shell."""
    c = container(workload(render(PUBLIC), "transceiver"))
    assert c["command"][:2] == ["/bin/sh", "-c"]
    fake = tmp_path / "transceiver"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "POD_NAME": "rtcedge-transceiver-12"}
    out = subprocess.run(
        [*c["command"], *c["args"]], env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:3] == ["serve", "--id", "12"]
    assert out[3 : 3 + len(c["args"])] == c["args"]


def test_pod_index_label_mode_takes_the_id_from_the_downward_api():
    values = merge(PUBLIC, {"transceiver": {"idSource": "podIndexLabel"}})
    trx = workload(render(values), "transceiver")
    assert container(trx)["command"] == ["transceiver", "serve"]
    ref = env_of(trx)["RTCEDGE_TRANSCEIVER_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert ref == "metadata.labels['apps.kubernetes.io/pod-index']"


def test_pod_index_label_mode_is_refused_before_kubernetes_1_28():
    values = merge(PUBLIC, {"transceiver": {"idSource": "podIndexLabel"}})
    with pytest.raises(helm.HelmError, match=r"needs Kubernetes >= 1\.28"):
        render(values, kube_version="v1.27.9")


def test_deny_and_allow_networks_reach_the_relay_only_when_set(monkeypatch):
    """Finding 4: extra denied client networks and exceptions, as environment variables (so a
    chart without them renders for any relay version); nothing when left empty."""
    env = env_of(workload(render(PUBLIC), "relay"))
    assert "RTCEDGE_DENY_NETWORKS" not in env and "RTCEDGE_ALLOW_NETWORKS" not in env
    deny, allow = ["198.18.0.0/15", "2001:db8::/32"], ["10.8.0.0/16"]
    values = merge(PUBLIC, {"relay": {"denyNetworks": deny, "allowNetworks": allow}})
    relay = workload(render(values), "relay")
    env = resolve_env(relay, "10.1.2.3", monkeypatch)
    assert env["RTCEDGE_DENY_NETWORKS"] == "198.18.0.0/15,2001:db8::/32"
    assert env["RTCEDGE_ALLOW_NETWORKS"] == "10.8.0.0/16"
    # Once the relay knows the options, its parser reads them from there.
    params = (
        relay_cli.main.commands["serve"]
        .make_context("serve", expand(container(relay)["args"], env))
        .params
    )
    for option, wanted in (("deny_networks", deny), ("allow_networks", allow)):
        if option in params:
            given = [n for v in params[option] for n in str(v).replace(",", " ").split()]
            assert given == wanted, option


@pytest.mark.parametrize("where", ["denyNetworks", "allowNetworks"])
def test_deny_and_allow_networks_are_cidrs(where):
    with pytest.raises(helm.HelmValuesError, match=f"/relay/{where}/0"):
        render(merge(PUBLIC, {"relay": {where: ["10.0.0.1"]}}))


def test_dns_grace_must_cover_more_than_one_lookup():
    values = merge(PUBLIC, {"relay": {"dnsIntervalSeconds": 40}})
    with pytest.raises(helm.HelmError, match=r"must be at least twice relay\.dnsIntervalSeconds"):
        render(values)
    args = container(workload(render(merge(values, {"relay": {"dnsGraceSeconds": 90}})), "relay"))
    assert "--dns-grace=90" in args["args"]


def test_relay_ids_follow_transceiver_replicas():
    values = merge(PUBLIC, {"transceiver": {"replicas": 7}})
    args = container(workload(render(values), "relay"))["args"]
    assert "--transceiver-ids=0-6" in args
    assert workload(render(values), "transceiver")["spec"]["replicas"] == 7


# ---- workloads: probes, disruption, security ----


@pytest.mark.parametrize("name", CI_NAMES)
def test_probes_grace_and_disruption_budgets(name):
    objects = render(ci_values(name))
    for component, port in (("relay", "metrics"), ("transceiver", "http")):
        obj = workload(objects, component)
        c = container(obj)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        assert obj["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 0
        assert c["resources"]["requests"]
        pdb = one(objects, "PodDisruptionBudget", f"rtcedge-{component}")
        assert pdb["spec"]["selector"] == obj["spec"]["selector"]
        assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("name", CI_NAMES)
def test_relay_workload_kind_follows_the_mode(name):
    values = ci_values(name)
    mode = values["relay"].get("mode", "loadBalancer")
    relay = workload(render(values), "relay")
    spec = relay["spec"]["template"]["spec"]
    if mode == "loadBalancer":
        assert relay["kind"] == "Deployment"
        anti = spec["affinity"]["podAntiAffinity"]
        assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == (
            "kubernetes.io/hostname"
        )
    else:
        assert relay["kind"] == "DaemonSet"
        assert relay["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 0
    assert spec.get("hostNetwork", False) == (mode == "hostNetwork")
    if mode == "hostNetwork":
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # it resolves cluster names


@pytest.mark.parametrize("name", CI_NAMES)
def test_pods_run_non_root_on_a_read_only_root_without_capabilities(name):
    objects = render(ci_values(name))
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        sc = container(obj)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}


def test_a_node_port_below_1024_adds_only_net_bind_service():
    values = merge(
        ci_values("hostnetwork"), {"relay": {"port": 443, "publicAddress": "198.51.100.7:443"}}
    )
    relay = workload(render(values), "relay")
    assert container(relay)["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["NET_BIND_SERVICE"],
    }
    # Kubernetes cannot hand an added capability to a non-root process (no ambient set).
    assert relay["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 0
    assert "NET_BIND_SERVICE" in notes(values)
    # Elsewhere the low port is the Service's or the node's, mapped to 3478: nothing added.
    for mode, extra in (("loadBalancer", {"service": {"port": 443}}), ("hostPort", {})):
        values = merge(PUBLIC, {"relay": {"mode": mode, "hostPort": 443, **extra}})
        c = container(workload(render(values), "relay"))
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_termination_grace_must_exceed_the_drain():
    values = merge(PUBLIC, {"transceiver": {"drainGraceSeconds": 120}})
    spec = workload(render(values), "transceiver")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] == 5 + 120 + 15
    too_short = merge(values, {"transceiver": {"terminationGracePeriodSeconds": 125}})
    with pytest.raises(helm.HelmError, match="must exceed preStopSleepSeconds"):
        render(too_short)


# ---- keyring, Redis, network policy ----


def test_generated_keyring_is_one_a_relay_can_load():
    secret = one(render(PUBLIC), "Secret", "rtcedge-keyring")
    text = base64.b64decode(secret["data"]["keyring.json"]).decode()
    doc = json.loads(text)
    assert doc["signing_key_id"] == 0
    assert len(base64.b64decode(doc["keys"]["0"], validate=True)) == 32
    Keyring.from_json(text)  # what relay and transceiver do at start
    other = one(render(PUBLIC), "Secret", "rtcedge-keyring")
    assert other["data"] != secret["data"]  # random per install (upgrades keep it: lookup)


def test_given_keyring_and_existing_secret():
    content = ci_values("ipv6-external-redis")["keyring"]["content"]
    secret = one(render(merge(PUBLIC, {"keyring": {"content": content}})), "Secret")
    assert base64.b64decode(secret["data"]["keyring.json"]).decode() == content
    objects = render(merge(PUBLIC, {"keyring": {"existingSecret": "my-keys"}}))
    assert not find(objects, "Secret")
    for component in ("relay", "transceiver"):
        volumes = workload(objects, component)["spec"]["template"]["spec"]["volumes"]
        assert {"secretName": "my-keys", "defaultMode": 0o440} in [v.get("secret") for v in volumes]


@pytest.mark.parametrize("content", ["{}", "not json", '{"signing_key_id": 0}'])
def test_a_given_keyring_that_is_not_one_is_refused(content):
    with pytest.raises(helm.HelmError, match="must be a keyring"):
        render(merge(PUBLIC, {"keyring": {"content": content}}))


@pytest.mark.parametrize(
    ("redis", "url", "password_secret"),
    [
        ({}, None, None),
        (
            {"enabled": True},
            "redis://rtcedge-redis.voice.svc.cluster.local:6379/0",
            "rtcedge-redis",  # generated
        ),
        (
            {"enabled": True, "auth": {"existingSecret": "mine"}},
            "redis://rtcedge-redis.voice.svc.cluster.local:6379/0",
            "mine",
        ),
        ({"url": "redis://cache:6379/1"}, "redis://cache:6379/1", None),
        (
            {"url": "redis://cache:6379/1", "auth": {"existingSecret": "pw"}},
            "redis://cache:6379/1",
            "pw",
        ),
    ],
)
def test_redis_reaches_the_relay_only_through_its_environment(redis, url, password_secret):
    objects = render(merge(PUBLIC, {"redis": redis}))
    env = env_of(workload(objects, "relay"))
    assert env.get("RTCEDGE_REDIS_URL", {}).get("value") == url
    if password_secret is None:
        assert "RTCEDGE_REDIS_PASSWORD" not in env
    else:  # a reference to a Secret, never a value in the manifest
        assert env["RTCEDGE_REDIS_PASSWORD"] == {
            "name": "RTCEDGE_REDIS_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": password_secret, "key": "password"}},
        }
    in_chart = bool(redis.get("enabled"))
    assert bool(find(objects, "Deployment", "rtcedge-redis")) == in_chart
    assert bool(find(objects, "Service", "rtcedge-redis")) == in_chart
    assert bool(find(objects, "NetworkPolicy", "rtcedge-redis")) == in_chart
    generated = find(objects, "Secret", "rtcedge-redis")
    assert bool(generated) == (password_secret == "rtcedge-redis")
    if in_chart:
        redis_pod = workload(objects, "redis")
        c = container(redis_pod)
        assert "--save" in c["args"]  # no persistence: soft state
        # redis-server takes requirepass from the same Secret, on stdin, not its command line.
        assert env_of(redis_pod)["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"] == {
            "name": password_secret,
            "key": "password",
        }
        assert not any("requirepass" in a for a in c["args"])
        assert c["readinessProbe"]["exec"]["command"][:2] == ["redis-cli", "-e"]
    if generated:
        password = base64.b64decode(generated[0]["data"]["password"]).decode()
        assert len(password) == 32 and password.isalnum()


def test_redis_over_tls_mounts_the_ca_for_the_relay(monkeypatch):
    values = ci_values("ipv6-external-redis")
    relay = workload(render(values), "relay")
    env = resolve_env(relay, SAMPLE_POD_IP["IPv6"], monkeypatch)
    assert env["RTCEDGE_REDIS_CA_FILE"] == "/etc/rtcedge/redis-ca/ca.crt"
    pod = relay["spec"]["template"]["spec"]
    assert {"name": "redis-ca", "secret": {"secretName": "redis-ca", "defaultMode": 0o444}} in (
        pod["volumes"]
    )
    assert {"name": "redis-ca", "mountPath": "/etc/rtcedge/redis-ca", "readOnly": True} in (
        container(relay)["volumeMounts"]
    )
    ctx = relay_cli.main.commands["serve"].make_context(
        "serve", expand(container(relay)["args"], env)
    )
    config = relay_cli.build_config(ctx.params)
    assert config.redis_url == "rediss://redis.cache.svc.cluster.local:6380/0"
    assert config.redis_auth.ca_file == "/etc/rtcedge/redis-ca/ca.crt"
    assert config.redis_auth.password == "from-a-secret"  # RTCEDGE_REDIS_PASSWORD, a secretKeyRef
    on_config_map = merge(values, {"redis": {"tls": {"caSecret": "", "caConfigMap": "ca"}}})
    pod = workload(render(on_config_map), "relay")["spec"]["template"]["spec"]
    assert {"name": "redis-ca", "configMap": {"name": "ca"}} in pod["volumes"]


@pytest.mark.parametrize(
    ("redis", "message"),
    [
        ({"enabled": True, "url": "redis://x:6379/0"}, "only one of redis"),
        ({"url": "redis://:hunter2@cache:6379/0"}, "must not carry a password"),
        ({"url": "rediss://user:hunter2@cache:6380/0"}, "must not carry a password"),
        ({"url": "redis://cache:6379/0", "tls": {"caSecret": "ca"}}, "need a rediss://"),
        ({"enabled": True, "tls": {"caSecret": "ca"}}, "the in-chart Redis has no TLS"),
        (
            {"url": "rediss://c:6380/0", "tls": {"caSecret": "a", "caConfigMap": "b"}},
            "not both",
        ),
        ({"auth": {"existingSecret": "pw"}}, "no Redis is"),
        ({"tls": {"caSecret": "ca"}}, "no Redis is"),
    ],
)
def test_redis_settings_that_cannot_work_or_would_show_a_secret_are_refused(redis, message):
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(merge(PUBLIC, {"redis": redis}))


def test_a_user_name_without_a_password_may_stay_in_the_url():
    values = merge(PUBLIC, {"redis": {"url": "redis://relay@cache:6379/0"}})
    assert env_of(workload(render(values), "relay"))["RTCEDGE_REDIS_URL"]["value"] == (
        "redis://relay@cache:6379/0"
    )


@pytest.mark.parametrize("name", CI_NAMES)
def test_no_secret_is_rendered_in_plain_text(name):
    """Passwords and keys reach pods only as Secret references: no env value or argument holds
    a password, and no Redis URL in the manifest carries one."""
    for obj in render(ci_values(name)):
        if obj["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        for entry in env_of(obj).values():
            if any(w in entry["name"] for w in ("PASSWORD", "AUTH", "TOKEN", "KEYRING")):
                assert "value" not in entry, entry
        c = container(obj)
        assert not any(
            w in a for a in c.get("args", []) for w in ("password", "requirepass", "keyring-json")
        )


@pytest.mark.parametrize("name", CI_NAMES)
def test_only_relays_reach_the_transceivers_media_port(name):
    values = ci_values(name)
    objects = render(values)
    if not values.get("networkPolicy", {}).get("enabled", True):
        assert not find(objects, "NetworkPolicy")
        return
    policy = one(objects, "NetworkPolicy", "rtcedge-transceiver")
    trx = workload(objects, "transceiver")
    assert policy["spec"]["podSelector"]["matchLabels"] == trx["spec"]["selector"]["matchLabels"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    udp_rules = [
        r for r in policy["spec"]["ingress"] if any(p["protocol"] == "UDP" for p in r["ports"])
    ]
    assert len(udp_rules) == 1
    (rule,) = udp_rules
    assert rule["ports"] == [{"protocol": "UDP", "port": 5000}]
    if values["relay"].get("mode") == "hostNetwork":
        cidrs = values["networkPolicy"]["relayNodeCIDRs"]
        assert rule["from"] == [{"ipBlock": {"cidr": c}} for c in cidrs]
    else:
        relay = workload(objects, "relay")
        assert rule["from"] == [{"podSelector": relay["spec"]["selector"]}]
    # Nothing else opens UDP to the transceivers; HTTP from httpFrom, metrics from metricsFrom.
    others = {r["ports"][0]["port"]: r for r in policy["spec"]["ingress"] if r is not rule}
    assert [r["ports"] for r in others.values()] == [
        [{"protocol": "TCP", "port": 8080}],
        [{"protocol": "TCP", "port": 9479}],
    ]
    np = values.get("networkPolicy", {})
    # With httpFrom, the transceivers are added: they pass session requests on to each other.
    peers = [{"podSelector": trx["spec"]["selector"]}]
    assert others[8080].get("from") == (np["httpFrom"] + peers if np.get("httpFrom") else None)
    assert others[9479].get("from") == (np.get("metricsFrom") or None)


def test_dashboard_configmap_carries_the_chart_dashboard():
    cm = one(render(PUBLIC), "ConfigMap", "rtcedge-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "rtcedge.json").read_text())
    assert json.loads(cm["data"]["rtcedge.json"]) == shipped


def test_notes_say_where_signaling_and_media_are():
    text = notes(PUBLIC)
    assert "203.0.113.10:3478" in text
    assert "rtcedge-transceiver.voice.svc.cluster.local:80/whip" in text
    assert "port-forward service/rtcedge-transceiver" in text
    ingress = notes(ci_values("hostport-redis"))
    assert "https://whip.example.com/whip" in ingress
