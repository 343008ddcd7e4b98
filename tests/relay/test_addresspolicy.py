"""The denied-address policy as a plain object: built-in ranges, added ranges, exceptions."""

from __future__ import annotations

import ipaddress

import pytest

from common.config import ConfigError
from relay.addresspolicy import DEFAULT_DENY_NETWORKS, LOOPBACK_NETWORKS, AddressPolicy
from relay.config import parse_networks


def policy(deny=(), allow=(), defaults=True) -> AddressPolicy:
    base = DEFAULT_DENY_NETWORKS if defaults else ()
    return AddressPolicy(
        parse_networks("--deny-network", [*base, *deny]),
        parse_networks("--allow-network", allow),
    )


def denied(p: AddressPolicy, address: str) -> bool:
    return p.denies(ipaddress.ip_address(address).packed)


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0", "0.1.2.3", "127.0.0.1", "127.255.0.9", "10.0.0.1", "172.16.5.4",
        "172.31.255.255", "192.168.1.1", "100.64.0.1", "169.254.169.254", "192.0.2.7",
        "198.18.0.1", "224.0.0.251", "239.255.255.250", "240.0.0.1", "255.255.255.255",
        "::", "::1", "::ffff:8.8.8.8", "::ffff:127.0.0.1", "fe80::1", "fd12:3456::1",
        "ff02::1", "2001:db8::1", "64:ff9b:1::1",
    ],
)  # fmt: skip
def test_special_purpose_addresses_are_denied_by_default(address):
    assert denied(policy(), address)


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "193.0.2.1", "2a00:1450::1", "2001::1"],
)
def test_public_addresses_are_not_denied(address):
    assert not denied(policy(), address)


def test_added_ranges_deny_and_exceptions_win_over_every_range():
    p = policy(deny=["203.0.0.0/16", "2a00:1450::/32"], allow=["10.20.0.0/16", "127.0.0.1/32"])
    assert denied(p, "203.0.7.7") and denied(p, "2a00:1450::5")
    assert not denied(p, "10.20.3.4") and denied(p, "10.21.3.4")
    assert not denied(p, "127.0.0.1") and denied(p, "127.0.0.2")


def test_local_mode_allows_loopback_only():
    p = policy(allow=LOOPBACK_NETWORKS)
    assert not denied(p, "127.0.0.1") and not denied(p, "127.3.2.1") and not denied(p, "::1")
    assert denied(p, "10.0.0.1") and denied(p, "::ffff:127.0.0.1") and denied(p, "fe80::1")


def test_no_ranges_deny_nothing():
    p = policy(defaults=False)
    assert not denied(p, "127.0.0.1") and not denied(p, "::1")


@pytest.mark.parametrize("bad", ["10.0.0.300/8", "10.0.0.1/8", "fe80::/200", "nonsense", "1.2.3"])
def test_a_bad_cidr_is_a_config_error_naming_the_option(bad):
    with pytest.raises(ConfigError) as exc:
        parse_networks("--allow-network", [bad])
    assert exc.value.option == "--allow-network" and repr(bad) in str(exc.value)


def test_the_environment_form_is_comma_or_space_separated():
    nets = parse_networks("--deny-network", ["10.0.0.0/8,192.168.0.0/16", "fc00::/7 ::1/128"])
    assert [str(n) for n in nets] == ["10.0.0.0/8", "192.168.0.0/16", "fc00::/7", "::1/128"]
