"""``helm`` and ``kubectl`` to run docs/deploy.md's cluster examples where no cluster can be had
(none can be built from what these machines reach, issue 27): the commands as written, checked
as far as they can be offline, so that a misspelt flag, value or object name fails.

- ``helm install|upgrade``: Helm's own engine (helm-python-sdk) renders the chart with the values
  the flags make (``-f``, ``--set``, ``--set-string``, ``--set-file`` parsed by Helm's strvals,
  ``--reuse-values`` over the release's last values), so the schema and the chart's refusals
  apply; then the rendered relay and transceiver command lines are parsed by the real ``relay
  serve`` / ``transceiver serve``, and every Secret or ConfigMap the pods reference must exist
  (rendered, or made by ``kubectl create`` before), as the kubelet would insist.
- ``kubectl``: ``create secret generic`` / ``create configmap`` (files read), ``get secret NAME -o
  jsonpath={.data.KEY}``, ``get pods -l SELECTOR -o name``, ``exec POD -- ...`` and ``rollout
  restart KIND/NAME`` against the objects the releases rendered. Anything else is refused.

It is not a cluster: nothing runs, and ``exec`` only records what it was asked. The state (the
releases, the objects, every command) is one JSON file, ``$RTCEDGE_CLUSTER_STANDIN``.

    python -m tests.deploy.cluster_standin helm|kubectl ARGS...
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import helm_python as helm
import pytest
import yaml

from tests.deploy.render import (
    CHART,
    container,
    merge,
    pod_config,
    relay_config,
    render_files,
    workload,
)


class Refused(Exception):
    """What the real command (or the cluster) would refuse, in its words."""


def load_state() -> dict[str, Any]:
    path = Path(os.environ["RTCEDGE_CLUSTER_STANDIN"])
    if path.exists():
        return json.loads(path.read_text())
    return {"releases": {}, "created": [], "log": []}


def save_state(state: dict[str, Any]) -> None:
    Path(os.environ["RTCEDGE_CLUSTER_STANDIN"]).write_text(json.dumps(state))


def objects_in(state: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """Every object of ``namespace``: the releases' and those ``kubectl create`` made."""
    found = [o for o in state["created"] if o["metadata"]["namespace"] == namespace]
    for release in state["releases"].values():
        if release["namespace"] == namespace:
            found += release["objects"]
    return found


def take(args: list[str], flags: dict[str, str]) -> tuple[list[str], dict[str, list[str]]]:
    """(positional arguments, {flag: values}) for flags that take a value (``flags``: every
    spelling -> its name) or none (mapped to ""); an unknown flag is refused."""
    positional: list[str] = []
    given: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            i += 1
            continue
        name, eq, inline = arg.partition("=")
        if name not in flags:
            raise Refused(f"unknown flag: {name}")
        key = flags[name]
        if key.endswith("?"):  # a switch
            given.setdefault(key[:-1], []).append("true")
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 1
        else:
            raise Refused(f"flag needs an argument: {name}")
        given.setdefault(key, []).append(value)
        i += 1
    return positional, given


HELM_FLAGS = {
    "-n": "namespace", "--namespace": "namespace", "-f": "values", "--values": "values",
    "--set": "set", "--set-string": "set-string", "--set-file": "set-file",
    "--create-namespace": "create-namespace?", "--reuse-values": "reuse-values?",
    "--install": "install?", "-i": "install?",
}  # fmt: skip


def helm_main(args: list[str], state: dict[str, Any]) -> str:
    if not args or args[0] not in ("install", "upgrade"):
        raise Refused(f"the stand-in runs helm install|upgrade only, not {args[:1]}")
    verb = args[0]
    positional, flags = take(args[1:], HELM_FLAGS)
    if len(positional) != 2:
        raise Refused(f'"helm {verb}" requires 2 arguments: NAME CHART')
    name, chart = positional
    if Path(chart).resolve() != CHART:
        raise Refused(f"chart {chart}: the stand-in renders {CHART} only")
    namespace = flags.get("namespace", ["default"])[-1]
    previous = state["releases"].get(name)
    if verb == "install" and previous:
        raise Refused(f"INSTALLATION FAILED: cannot re-use a name that is still in use: {name}")
    if verb == "upgrade" and not previous and "install" not in flags:
        raise Refused(f'UPGRADE FAILED: "{name}" has no deployed releases')
    if previous and previous["namespace"] != namespace:
        raise Refused(f"release {name} is in namespace {previous['namespace']}, not {namespace}")
    if not previous and namespace != "default" and "create-namespace" not in flags:
        known = {o["metadata"]["namespace"] for o in state["created"]}
        if namespace not in known:
            raise Refused(f'namespaces "{namespace}" not found (--create-namespace?)')
    # Helm's order: the old values (--reuse-values), files, --set, --set-string, --set-file.
    values: dict[str, Any] = previous["values"] if previous and "reuse-values" in flags else {}
    for path in flags.get("values", []):
        values = merge(values, helm.values_from_yaml(Path(path).read_text()))
    for flag, parse in (
        ("set", helm.parse_set_string),
        ("set-string", helm.parse_set_string_values),
        ("set-file", helm.parse_set_file),
    ):
        for expression in flags.get(flag, []):
            values = merge(values, parse(expression))
    try:
        files = render_files(values, release=name, namespace=namespace, is_install=not previous)
    except (helm.HelmError, helm.HelmValuesError) as exc:
        raise Refused(f"{verb.upper()} FAILED: {exc}") from exc
    objects = [
        doc
        for path, text in sorted(files.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    check_pods_would_start(objects, objects_in(state, namespace), namespace)
    revision = previous["revision"] + 1 if previous else 1
    state["releases"][name] = {
        "namespace": namespace,
        "values": values,
        "objects": objects,
        "revision": revision,
    }
    notes = next((t for p, t in files.items() if p.endswith("NOTES.txt")), "")
    return f"NAME: {name}\nNAMESPACE: {namespace}\nSTATUS: deployed\nREVISION: {revision}\n{notes}"


def check_pods_would_start(objects: list[dict], existing: list[dict], namespace: str) -> None:
    """The real parsers take the rendered command lines, and the Secrets and ConfigMaps the pods
    name exist (a pod whose Secret is missing never starts)."""
    have = {(o["kind"], o["metadata"]["name"]) for o in [*objects, *existing]}
    for kind, name in referenced(objects):
        if (kind, name) not in have:
            raise Refused(f'pods would not start: {kind} "{name}" not found in "{namespace}"')
    monkeypatch = pytest.MonkeyPatch()
    try:
        relay_config(objects, monkeypatch)
        if any(o["kind"] == "StatefulSet" for o in objects):
            with tempfile.TemporaryDirectory() as root:
                transceiver_pod_config(objects, existing, monkeypatch, Path(root))
    except (click.ClickException, ValueError) as exc:
        raise Refused(f"a rendered command line fails: {exc}") from exc
    finally:
        monkeypatch.undo()


def transceiver_pod_config(
    objects: list[dict], existing: list[dict], monkeypatch: Any, root: Path
) -> Any:
    """The config transceiver pod 1 starts with, the Secrets and ConfigMaps it mounts written
    where the kubelet would put them (under ``root``)."""
    trx = workload(objects, "transceiver")
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in [*existing, *objects]}
    volumes = {v["name"]: v for v in trx["spec"]["template"]["spec"].get("volumes", [])}
    files: dict[str, str] = {}
    for mount in container(trx).get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "secret" in volume:
            source = by_name.get(("Secret", volume["secret"]["secretName"]), {})
            data = {k: base64.b64decode(v).decode() for k, v in source.get("data", {}).items()}
        elif "configMap" in volume:
            data = dict(by_name.get(("ConfigMap", volume["configMap"]["name"]), {}).get("data", {}))
        else:
            continue
        for key, content in data.items():
            files[f"{mount['mountPath']}/{key}"] = content
    return pod_config(objects, monkeypatch, files, root)


def referenced(objects: list[dict]) -> set[tuple[str, str]]:
    """(kind, name) of every Secret and ConfigMap the workloads' pods need (not optional)."""
    found: set[tuple[str, str]] = set()
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            for env in c.get("env", []):
                ref = env.get("valueFrom", {})
                for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                    if key in ref and not ref[key].get("optional"):
                        found.add((kind, ref[key]["name"]))
        for volume in pod.get("volumes", []):
            sources = [volume, *volume.get("projected", {}).get("sources", [])]
            for source in sources:
                for key, kind, field in (
                    ("secret", "Secret", "secretName"),
                    ("configMap", "ConfigMap", "name"),
                ):
                    ref = source.get(key)
                    if ref and not ref.get("optional"):
                        found.add((kind, ref.get(field) or ref.get("name")))
    return found


KUBECTL_FLAGS = {
    "-n": "namespace", "--namespace": "namespace", "-o": "output", "--output": "output",
    "-l": "selector", "--selector": "selector", "--from-file": "from-file",
    "--from-literal": "from-literal",
}  # fmt: skip


def kubectl_main(args: list[str], state: dict[str, Any]) -> str:
    if "--" in args:  # exec POD -- COMMAND...
        split = args.index("--")
        args, command = args[:split], args[split + 1 :]
    else:
        command = []
    positional, flags = take(args, KUBECTL_FLAGS)
    namespace = flags.get("namespace", ["default"])[-1]
    objects = objects_in(state, namespace)
    match positional:
        case ["create", "secret", "generic", name] | ["create", "configmap", name]:
            return create(state, positional[1], name, namespace, flags)
        case ["get", "secret", name]:
            return get_secret(objects, name, flags.get("output", [""])[-1])
        case ["get", "pods"]:
            if flags.get("output") != ["name"]:
                raise Refused("the stand-in prints pods with -o name only")
            return "".join(f"pod/{p}\n" for p in pods(objects, flags.get("selector", [""])[-1]))
        case ["exec", pod]:
            known = {f"pod/{p}" for p in pods(objects, "")}
            if pod not in known and f"pod/{pod}" not in known:
                raise Refused(f'pods "{pod}" not found')
            if not command:
                raise Refused("exec needs a command after --")
            return ""
        case ["rollout", "restart", target]:
            kind, _, name = target.partition("/")
            kinds = {"statefulset": "StatefulSet", "deployment": "Deployment"}
            kinds["daemonset"] = "DaemonSet"
            if not any(
                (o["kind"], o["metadata"]["name"]) == (kinds.get(kind), name) for o in objects
            ):
                raise Refused(f'{kind}s.apps "{name}" not found')
            return f"{target} restarted\n"
    raise Refused(f"the stand-in does not run kubectl {' '.join(positional)}")


def create(state: dict, what: str, name: str, namespace: str, flags: dict) -> str:
    data: dict[str, str] = {}
    for spec in flags.get("from-file", []):
        key, eq, path = spec.partition("=")
        path = path if eq else key
        key = key if eq else Path(path).name
        content = Path(path).read_bytes()  # FileNotFoundError: kubectl's "no such file"
        data[key] = base64.b64encode(content).decode()
    for spec in flags.get("from-literal", []):
        key, _, value = spec.partition("=")
        data[key] = base64.b64encode(value.encode()).decode()
    kind = "Secret" if what == "secret" else "ConfigMap"
    if any(
        (o["kind"], o["metadata"]["name"]) == (kind, name) for o in objects_in(state, namespace)
    ):
        raise Refused(f'{what}s "{name}" already exists')
    if kind == "ConfigMap":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
    state["created"].append(
        {"kind": kind, "metadata": {"name": name, "namespace": namespace}, "data": data}
    )
    return f"{what}/{name} created\n"


def get_secret(objects: list[dict], name: str, output: str) -> str:
    found = [o for o in objects if (o["kind"], o["metadata"]["name"]) == ("Secret", name)]
    if not found:
        raise Refused(f'secrets "{name}" not found')
    data = dict(found[0].get("data", {}))
    for key, value in found[0].get("stringData", {}).items():
        data[key] = base64.b64encode(value.encode()).decode()
    if not (output.startswith("jsonpath={.data.") and output.endswith("}")):
        raise Refused(f"the stand-in takes -o jsonpath={{.data.KEY}} only, not {output}")
    key = output[len("jsonpath={.data.") : -1].replace("\\.", ".")
    return data.get(key, "")


def pods(objects: list[dict], selector: str) -> list[str]:
    """Names of the pods the workloads would have, where their labels match ``selector``."""
    wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
    names = []
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        labels = obj["spec"]["template"]["metadata"].get("labels", {})
        if any(labels.get(k) != v for k, v in wanted.items()):
            continue
        base = obj["metadata"]["name"]
        count = obj["spec"].get("replicas", 2)
        if obj["kind"] == "StatefulSet":
            names += [f"{base}-{i}" for i in range(count)]
        else:
            names += [f"{base}-standin{i}" for i in range(count)]
    return names


def main() -> int:
    tool, args = sys.argv[1], sys.argv[2:]
    state = load_state()
    state["log"].append([tool, *args])
    try:
        out = (helm_main if tool == "helm" else kubectl_main)(args, state)
    except (Refused, OSError) as exc:
        save_state(state)
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    save_state(state)
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
