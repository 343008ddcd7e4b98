"""The region chooser (transceiver/regions.py): which relay addresses an answer advertises, from
the trusted region header or the client's prefix; and how a bad table fails at start."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from transceiver.regions import (
    DEFAULT_REGION,
    Choice,
    RegionTable,
    parse_region,
    parse_region_prefix,
)

CLUSTER = ("203.0.113.5", 3478)  # --advertise: the cluster's own relay
EU = (("198.51.100.10", 3478), ("198.51.100.11", 3478))
US = (("192.0.2.20", 3478),)
EIGHT = tuple((f"192.0.2.{i}", 1) for i in range(1, 9))  # eight, and the backup: one too many


def table(**kw) -> RegionTable:
    regions = kw.pop("regions", [("eu", EU), ("us", US)])
    prefixes = kw.pop(
        "prefixes", [("10.0.0.0/8", "us"), ("10.1.0.0/16", "eu"), ("2001:db8::/32", "eu")]
    )
    return RegionTable(CLUSTER, regions, prefixes, kw.pop("header", "X-Region"), **kw)


def test_the_header_names_the_region_and_the_backup_comes_last():
    assert table().choose("eu", "10.0.0.1") == Choice("eu", (*EU, CLUSTER), "header")
    assert table().choose(" EU ", None).region == "eu", "case and spaces do not matter"


def test_without_a_header_the_longest_prefix_wins():
    chooser = table()
    assert chooser.choose(None, "10.1.2.3") == Choice("eu", (*EU, CLUSTER), "prefix")
    assert chooser.choose(None, "10.2.0.1") == Choice("us", (*US, CLUSTER), "prefix")
    assert chooser.choose(None, "2001:db8::7").region == "eu"
    assert chooser.choose(None, "::ffff:10.1.0.9").region == "eu", "IPv4-mapped is IPv4"


def test_a_header_naming_no_region_is_ignored_for_the_prefix_or_the_default():
    chooser = table()
    assert chooser.choose("mars", "10.1.0.1") == Choice("eu", (*EU, CLUSTER), "prefix")
    assert chooser.choose("default", "192.0.2.1") == Choice(DEFAULT_REGION, (CLUSTER,), "default")


def test_a_client_of_no_region_gets_the_cluster_relay_alone():
    for ip in ("192.0.2.1", "", None, "not-an-ip"):
        assert table().choose(None, ip) == Choice(DEFAULT_REGION, (CLUSTER,), "default")
    assert RegionTable(CLUSTER).choose("eu", "10.0.0.1") == Choice("default", (CLUSTER,), "default")


def test_the_backup_is_not_added_twice_and_can_be_turned_off():
    chooser = table(regions=[("eu", (EU[0], CLUSTER, EU[1])), ("us", US)])
    assert chooser.addresses("eu") == (EU[0], CLUSTER, EU[1]), "where the operator put it"
    off = table(backup=False)
    assert off.choose("eu", None).addresses == EU
    assert off.choose("us", None).addresses == US
    assert off.choose(None, "192.0.2.1").addresses == (CLUSTER,), "the default stays"


def test_the_metric_labels_are_the_configured_names_and_default():
    assert table().labels == ["eu", "us", "default"]


def test_parsing_the_options():
    assert parse_region("eu=198.51.100.10:3478,[2001:db8::1]:3478") == (
        "eu",
        (("198.51.100.10", 3478), ("2001:db8::1", 3478)),
    )
    assert parse_region_prefix("10.0.0.0/8=us") == ("10.0.0.0/8", "us")


@pytest.mark.parametrize(
    ("build", "option", "words"),
    [
        (lambda: parse_region("eu"), "--region", "NAME=HOST"),
        (lambda: parse_region("eu=relay.example"), "--region", "HOST:PORT"),
        (lambda: parse_region_prefix("10.0.0.0/8"), "--region-prefix", "CIDR=NAME"),
        (lambda: table(regions=[("eu", (("relay.example", 3478),))]), "--region", "IP address"),
        (lambda: table(regions=[("eu", (("192.0.2.1", 0),))], prefixes=[]), "--region", "port"),
        (lambda: table(regions=[("eu", EU), ("EU", US)], prefixes=[]), "--region", "twice"),
        (lambda: table(regions=[("eu", (EU[0], EU[0]))], prefixes=[]), "--region", "twice"),
        (lambda: table(regions=[("default", US)], prefixes=[]), "--region", "default"),
        (lambda: table(regions=[("e u", US)], prefixes=[]), "--region", "region name"),
        (lambda: table(prefixes=[("10.0.0.0/33", "eu")]), "--region-prefix", "not a network"),
        (lambda: table(prefixes=[("10.0.0.0/8", "asia")]), "--region-prefix", "no --region"),
        (lambda: table(prefixes=[("10.0.0.0/8", "eu")] * 2), "--region-prefix", "twice"),
        (lambda: table(regions=[], prefixes=[]), "--region-header", "no --region"),
        (lambda: table(header=" "), "--region-header", "name a header"),
        (lambda: table(regions=[("eu", EIGHT)], prefixes=[]), "--region", "at most"),
    ],
)
def test_a_bad_table_fails_naming_the_option(build, option, words):
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.option == option and words in str(caught.value)
