"""A private network namespace joined to ours by one veth pair: where a peer that will not use
loopback runs (Janus gathers no ICE candidate on ``lo``), still on a link of this machine only.

``VethNamespace`` makes a namespace ``rtcedge-bench-<pid>-<k>`` with its ``lo`` up and one end
of a veth pair in it; the other end stays here. Both ends get an address of a private /30
(``10.254.0.0/16`` by default, RFC 1918) that overlaps no address or route of this host, so
nothing is routed anywhere but across the pair: the namespace has no default route and no other
interface, and our end's /30 route covers only the pair. Leaving the ``with`` deletes the veth
(both ends go with one) and the namespace, however the block ends. A run killed without a
chance to clean up (SIGKILL) leaves them behind: the next ``VethNamespace`` deletes the ones
whose PID in the name is no longer alive (``sweep_stale``).

It runs ``ip`` (iproute2) and needs CAP_NET_ADMIN (root): ``NamespaceError`` says so. Programs
run in the namespace through ``ip netns exec``, which execs them (same PID, so they are stopped
and measured by it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import subprocess
from dataclasses import dataclass, field

POOL = ipaddress.IPv4Network("10.254.0.0/16")
PREFIX_LEN = 30  # two usable addresses: ours and the namespace's
NAME_PREFIX = "rtcedge-bench-"
IFNAME_PREFIX = "rtb"  # + pid + index + h (ours) / n (the namespace's): within IFNAMSIZ (15)
IP_TIMEOUT_S = 10.0
_STALE = re.compile(rf"^{NAME_PREFIX}(\d+)-\d+$")
_STALE_IF = re.compile(rf"^{IFNAME_PREFIX}(\d+)-\d+h$")


class NamespaceError(RuntimeError):
    """The namespace or its link could not be made (most often: not root)."""


def ip(*args: str, namespace: str | None = None) -> str:
    """Run ``ip ARGS`` (in ``namespace``, if given); its stdout. NamespaceError on failure."""
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"{' '.join(command)}: {exc}") from None
    if done.returncode != 0:
        hint = " (a network namespace needs root: CAP_NET_ADMIN)" if os.geteuid() != 0 else ""
        raise NamespaceError(f"{' '.join(command)}: {done.stderr.strip()}{hint}")
    return done.stdout


def host_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this namespace already uses: its addresses' and its routes' (every
    table), the default route left out (it overlaps everything)."""
    networks = []
    for entry in json.loads(ip("-j", "-4", "addr", "show") or "[]"):
        for a in entry.get("addr_info", []):
            networks.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for route in json.loads(ip("-j", "-4", "route", "show", "table", "all") or "[]"):
        dst = route.get("dst", "default")
        if dst != "default" and ":" not in dst:
            network = ipaddress.IPv4Network(dst, strict=False)
            if network.prefixlen > 0:
                networks.append(network)
    return networks


def free_subnet(
    used: list[ipaddress.IPv4Network], seed: int, pool: ipaddress.IPv4Network = POOL
) -> ipaddress.IPv4Network:
    """A /30 of ``pool`` that overlaps none of ``used``, the search starting at ``seed`` (our
    PID: two runs at once start apart). Pure: the host's networks are passed in."""
    subnets = list(pool.subnets(new_prefix=PREFIX_LEN))
    for k in range(len(subnets)):
        candidate = subnets[(seed + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise NamespaceError(f"no free /{PREFIX_LEN} in {pool}: every one overlaps this host's")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete the namespaces and veths a killed run left behind (the PID in their name is gone);
    the names deleted."""
    swept = []
    with contextlib.suppress(NamespaceError):
        for entry in json.loads(ip("-j", "netns", "list") or "[]"):
            match = _STALE.match(entry.get("name", ""))
            if match and not pid_alive(int(match[1])):
                with contextlib.suppress(NamespaceError):
                    ip("netns", "delete", entry["name"])
                    swept.append(entry["name"])
    with contextlib.suppress(NamespaceError):
        for entry in json.loads(ip("-j", "link", "show") or "[]"):
            match = _STALE_IF.match(entry.get("ifname", ""))
            if match and not pid_alive(int(match[1])):
                with contextlib.suppress(NamespaceError):
                    ip("link", "delete", entry["ifname"])
                    swept.append(entry["ifname"])
    return swept


_made = 0  # namespaces this process made: the k in their names


@dataclass
class VethNamespace:
    """A namespace of our own with one veth pair to ours (module docstring); a context manager."""

    name: str = ""
    host_ifname: str = ""
    peer_ifname: str = ""
    subnet: ipaddress.IPv4Network | None = None
    swept: list[str] = field(default_factory=list)  # what a killed run had left behind
    _made: list[tuple[str, ...]] = field(default_factory=list)  # what to delete, last first

    @property
    def host_address(self) -> str:
        """Our end's address: where the namespace's programs reach us."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    @property
    def peer_address(self) -> str:
        """The namespace's end: where its programs listen."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 2)

    def exec_command(self, command: list[str]) -> list[str]:
        """``command`` run in the namespace (``ip netns exec`` execs it: the PID is its own)."""
        return ["ip", "netns", "exec", self.name, *command]

    def __enter__(self) -> VethNamespace:
        global _made
        pid, k = os.getpid(), _made
        _made += 1
        self.name = self.name or f"{NAME_PREFIX}{pid}-{k}"
        self.host_ifname = f"{IFNAME_PREFIX}{pid}-{k}h"
        self.peer_ifname = f"{IFNAME_PREFIX}{pid}-{k}n"
        self.swept = sweep_stale()
        try:
            self.subnet = free_subnet(host_networks(), pid * 7 + k)
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _setup(self) -> None:
        ip("netns", "add", self.name)
        self._made.append(("netns", "delete", self.name))
        ip("link", "add", self.host_ifname, "type", "veth", "peer", "name", self.peer_ifname,
           "netns", self.name)  # fmt: skip
        self._made.append(("link", "delete", self.host_ifname))
        ip("link", "set", "lo", "up", namespace=self.name)
        for ifname, address, namespace in (
            (self.host_ifname, self.host_address, None),
            (self.peer_ifname, self.peer_address, self.name),
        ):
            ip("addr", "add", f"{address}/{PREFIX_LEN}", "dev", ifname, namespace=namespace)
            ip("link", "set", ifname, "up", namespace=namespace)

    def __exit__(self, *exc: object) -> None:
        """Delete the veth (its two ends go together), then the namespace; each step tried
        whatever happened to the one before."""
        for undo in sorted(self._made, key=lambda step: step[0] != "link"):  # the veth first
            with contextlib.suppress(NamespaceError):
                ip(*undo)
        self._made.clear()
