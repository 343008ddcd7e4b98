"""The benchmark's private network namespace (testbed/netns.py): a /30 that overlaps nothing of
the host's, a real namespace and veth pair that are gone after the ``with`` however it ends,
and the leftovers of a killed run deleted by the next one."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from testbed.netns import NAME_PREFIX, NamespaceError, VethNamespace, free_subnet, ip

real = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="a network namespace needs Linux and root (CAP_NET_ADMIN)",
)


def test_the_subnet_overlaps_none_of_the_hosts_networks() -> None:
    pool = ipaddress.IPv4Network("10.254.0.0/29")  # two /30s
    taken = [ipaddress.IPv4Network("10.254.0.0/30")]
    assert free_subnet(taken, seed=0, pool=pool) == ipaddress.IPv4Network("10.254.0.4/30")
    assert free_subnet([], seed=1, pool=pool) == ipaddress.IPv4Network("10.254.0.4/30")
    with pytest.raises(NamespaceError, match="no free /30"):
        free_subnet([ipaddress.IPv4Network("10.0.0.0/8")], seed=0, pool=pool)


def namespaces() -> set[str]:
    return {n["name"] for n in json.loads(ip("-j", "netns", "list") or "[]")}


def links() -> set[str]:
    return {link["ifname"] for link in json.loads(ip("-j", "link", "show") or "[]")}


@real
def test_the_namespace_reaches_us_over_its_veth_and_is_gone_after() -> None:
    with VethNamespace() as ns:
        assert ns.name in namespaces() and ns.host_ifname in links()
        inside = subprocess.run(
            ns.exec_command(["ip", "-j", "-4", "addr", "show"]), capture_output=True, text=True
        )
        addresses = {a["local"] for entry in json.loads(inside.stdout) for a in entry["addr_info"]}
        assert addresses == {"127.0.0.1", ns.peer_address}  # lo and its end, nothing else
        routes = subprocess.run(
            ns.exec_command(["ip", "-j", "-4", "route", "show"]), capture_output=True, text=True
        )
        assert [r["dst"] for r in json.loads(routes.stdout)] == [f"{ns.subnet}"]  # no default
    assert ns.name not in namespaces() and ns.host_ifname not in links()


@real
def test_an_exception_inside_still_deletes_namespace_and_veth() -> None:
    with pytest.raises(RuntimeError, match="boom"), VethNamespace() as ns:
        raise RuntimeError("boom")
    assert ns.name not in namespaces() and ns.host_ifname not in links()


@real
def test_what_a_killed_run_left_is_deleted_by_the_next() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # its PID is now no one's
    stale = f"{NAME_PREFIX}{gone.pid}-0"
    ip("netns", "add", stale)
    try:
        with VethNamespace() as ns:
            assert stale in ns.swept
            assert stale not in namespaces()
    finally:
        if stale in namespaces():
            ip("netns", "delete", stale)
