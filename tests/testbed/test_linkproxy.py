"""The link proxy on real loopback sockets: delay and loss as configured, NAT-like mappings,
bounded. Probes and an echo server through it; no timed assertions beyond the emulated delay
(which is the behaviour under test, with a 10 % band as the benchmark uses)."""

from __future__ import annotations

import socket
import time

import pytest

from testbed.linkmodel import LinkSpec
from testbed.linkprobe import LinkProbe, check, wilson_interval
from testbed.linkproxy import LinkProxy, LinkThread


@pytest.fixture
def links():
    thread = LinkThread().start()
    yield thread
    thread.stop()


def udp(host: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    s.settimeout(2)
    return s


def test_probes_through_the_proxy_see_the_configured_delay_and_loss(links: LinkThread) -> None:
    up, down = LinkSpec(40, 4, 5.0), LinkSpec(20, 1, 0.0)
    probe = LinkProbe(rate_pps=250, count=1000)
    proxy = links.add(LinkProxy(probe.reflector_address, up, down, seed=3))
    probe.via = proxy.address
    links.add(probe)
    time.sleep(probe.duration_s + 0.5)
    figures = links.call(probe.figures)
    assert figures["up"]["sent"] == 1000
    for direction, spec in (("up", up), ("down", down)):
        verdict = check(figures[direction], spec)
        assert verdict["delay_ok"], (direction, figures[direction])
        assert verdict["loss_ok"], (direction, figures[direction])
    assert figures["down"]["loss_pct"] == 0
    assert 2 <= figures["up"]["loss_pct"] <= 9
    counters = links.call(proxy.counters)
    assert counters["up"]["lost"] == 1000 - figures["up"]["received"]


def test_each_source_gets_its_own_mapping_and_its_own_replies(links: LinkThread) -> None:
    server = udp()
    proxy = links.add(
        LinkProxy(server.getsockname(), LinkSpec(5), LinkSpec(5), outside_host="127.0.0.2")
    )
    a, b = udp(), udp()
    a.sendto(b"from a", proxy.address)
    b.sendto(b"from b", proxy.address)
    seen = {}
    for _ in range(2):
        data, src = server.recvfrom(100)
        seen[data] = src
    assert seen[b"from a"] != seen[b"from b"]
    assert {src[0] for src in seen.values()} == {"127.0.0.2"}
    server.sendto(b"to a", seen[b"from a"])
    server.sendto(b"to b", seen[b"from b"])
    assert a.recvfrom(100) == (b"to a", proxy.address)
    assert b.recvfrom(100) == (b"to b", proxy.address)
    for s in (server, a, b):
        s.close()


def test_bounded_in_sources_packets_and_time(links: LinkThread) -> None:
    server = udp()
    proxy = links.add(
        LinkProxy(
            server.getsockname(), LinkSpec(1), LinkSpec(1), max_mappings=1, max_packets=3,
            max_seconds=1.0,
        )
    )  # fmt: skip
    a, b = udp(), udp()
    a.sendto(b"1", proxy.address)
    assert server.recv(10) == b"1"
    b.sendto(b"refused", proxy.address)
    a.sendto(b"2", proxy.address)
    assert server.recv(10) == b"2"
    assert links.call(lambda: proxy.refused_mappings) == 1
    a.sendto(b"over the limit", proxy.address)  # the 4th datagram: the proxy closes
    time.sleep(0.2)
    assert links.call(lambda: proxy.closed)
    short = links.add(LinkProxy(server.getsockname(), LinkSpec(1), LinkSpec(1), max_seconds=0.2))
    time.sleep(0.4)
    assert links.call(lambda: short.closed)
    for s in (server, a, b):
        s.close()


def test_wilson_interval_holds_the_truth_for_zero_and_small_counts() -> None:
    lo, hi = wilson_interval(0, 1000)
    assert lo == 0 and 0.001 < hi < 0.005
    lo, hi = wilson_interval(20, 1000)
    assert lo < 0.02 < hi
