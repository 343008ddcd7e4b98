"""Which relay addresses an answer advertises: the client's region, chosen from the request.

A Global Relay deployment has relay ingress points near users everywhere (docs/global-relay.md).
The answer tells a client where to send: the near edge first, and the cluster's own relay
(``--advertise``) last as a backup candidate, so that ICE still connects while the edge is down.
Sans-I/O: ``RegionTable.choose`` takes what the HTTP layer knows (the region header, if a trusted
proxy set it, and the client's IP) and returns the region and its addresses.

- the header names a configured region (case-insensitive) -> that region;
- else the client's IP is in a ``--region-prefix`` -> the region of the longest such prefix;
- else ``default``: ``--advertise`` alone.

Every answer still has ONE ICE agent behind it (transceiver/call/ice.py): the extra addresses are
only advertised candidates, and a check through any of them reaches the same session.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from common.addr import Addr
from common.config import ConfigError, address_family, format_host_port, parse_host_port

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_REGION = "default"  # the label of sessions no region was chosen for
REGION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
MAX_REGIONS = 64  # bounds the metric's label set
MAX_ADDRESSES = 8  # candidates in one answer, the backup included


@dataclass(frozen=True)
class Choice:
    """What one answer advertises, and why."""

    region: str  # a configured region's name, or DEFAULT_REGION: the metric's label
    addresses: tuple[Addr, ...]  # most preferred first
    source: str  # "header", "prefix" or "default"


def parse_region(text: str) -> tuple[str, tuple[Addr, ...]]:
    """``NAME=HOST:PORT[,HOST:PORT...]`` (``--region``) -> (name, addresses); ConfigError."""
    name, sep, rest = text.strip().partition("=")
    if not sep or not rest.strip():
        raise ConfigError("--region", f"expected NAME=HOST:PORT[,HOST:PORT...], got {text!r}")
    addresses = tuple(parse_host_port("--region", part) for part in rest.split(","))
    return name.strip(), addresses


def parse_region_prefix(text: str) -> tuple[str, str]:
    """``CIDR=NAME`` (``--region-prefix``) -> (cidr, name); ConfigError."""
    cidr, sep, name = text.strip().partition("=")
    if not sep or not cidr.strip() or not name.strip():
        raise ConfigError("--region-prefix", f"expected CIDR=NAME, got {text!r}")
    return cidr.strip(), name.strip()


class RegionTable:
    """The configured regions and prefixes, checked once; ``choose`` per offer."""

    def __init__(
        self,
        advertise: Addr,
        regions: Iterable[tuple[str, tuple[Addr, ...]]] = (),
        prefixes: Iterable[tuple[str, str]] = (),
        header: str | None = None,
        backup: bool = True,
    ) -> None:
        self.advertise = advertise
        self.header = header
        self._regions: dict[str, tuple[str, tuple[Addr, ...]]] = {}  # folded name -> (name, addrs)
        for name, addresses in regions:
            self._add_region(name, addresses, backup)
        if len(self._regions) > MAX_REGIONS:
            raise ConfigError("--region", f"at most {MAX_REGIONS} regions")
        self._prefixes: list[tuple[Network, str]] = []
        for cidr, name in prefixes:
            try:
                network = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ConfigError("--region-prefix", f"not a network: {cidr!r}") from None
            if name.casefold() not in self._regions:
                raise ConfigError("--region-prefix", f"{cidr}={name}: no --region {name}")
            if any(network == known for known, _ in self._prefixes):
                raise ConfigError("--region-prefix", f"{network} given twice")
            self._prefixes.append((network, self._regions[name.casefold()][0]))
        self._prefixes.sort(key=lambda entry: entry[0].prefixlen, reverse=True)  # longest first
        if header is not None:
            if not header.strip():
                raise ConfigError("--region-header", "must name a header")
            if not self._regions:
                raise ConfigError("--region-header", "no --region for it to choose")

    def _add_region(self, name: str, addresses: tuple[Addr, ...], backup: bool) -> None:
        if not REGION_NAME.fullmatch(name):
            raise ConfigError(
                "--region", f"a region name is 1-32 of A-Z a-z 0-9 _ . - (got {name!r})"
            )
        folded = name.casefold()
        if folded == DEFAULT_REGION:
            raise ConfigError("--region", f"{DEFAULT_REGION!r} is the name of no region's answers")
        if folded in self._regions:
            raise ConfigError("--region", f"region {name!r} given twice")
        for host, port in addresses:
            address_family("--region", host)
            if port == 0:
                raise ConfigError("--region", f"{name}: needs the relay's real port, not 0")
        if len(set(addresses)) != len(addresses):
            raise ConfigError("--region", f"{name}: an address given twice")
        if backup and self.advertise not in addresses:
            addresses = (*addresses, self.advertise)
        if len(addresses) > MAX_ADDRESSES:
            raise ConfigError(
                "--region", f"{name}: at most {MAX_ADDRESSES} addresses, the backup included"
            )
        self._regions[folded] = (name, addresses)

    @property
    def labels(self) -> list[str]:
        """Every value the sessions-by-region label can take."""
        return [name for name, _ in self._regions.values()] + [DEFAULT_REGION]

    def addresses(self, region: str) -> tuple[Addr, ...]:
        """What an answer for ``region`` advertises (``default``: ``--advertise`` alone)."""
        found = self._regions.get(region.casefold())
        return found[1] if found else (self.advertise,)

    def choose(self, header_value: str | None, client_ip: str | None) -> Choice:
        """The region of a client: its (trusted) header, else its prefix, else the default.

        ``header_value`` must be None unless a trusted proxy set it (the HTTP layer decides);
        a value naming no configured region is ignored, as if absent.
        """
        if header_value:
            found = self._regions.get(header_value.strip().casefold())
            if found is not None:
                return Choice(found[0], found[1], "header")
        ip = _ip(client_ip)
        if ip is not None:
            for network, name in self._prefixes:
                if ip.version == network.version and ip in network:
                    return Choice(name, self._regions[name.casefold()][1], "prefix")
        return Choice(DEFAULT_REGION, (self.advertise,), "default")

    def describe(self) -> str:
        """One log line's worth: each region and what it advertises."""
        parts = [
            f"{name}={','.join(format_host_port(*a) for a in addrs)}"
            for name, addrs in self._regions.values()
        ]
        return " ".join(parts) or "none"


def _ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # a dual-stack listener's view of an IPv4 client
    return ip
