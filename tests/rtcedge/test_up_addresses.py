"""``rtcedge up`` on a wildcard and on IPv6 (real processes, real aiortc calls).

- ``--relay 0.0.0.0:P`` used to print ``ready`` with answers whose only candidate was
  ``0.0.0.0``: no call could connect. Answers now carry ``--advertise`` or the default route's
  address, never a wildcard.
- ``--relay [::1]:P`` ended in ``RuntimeError: no free port range`` (the internal ports were
  allocated on IPv4 sockets); the whole stack now runs on ``::1``.
- ``--relay '[::1]:P'`` with ``--http`` left at its IPv4 default failed with ``Error:
  --transceiver: cannot resolve transceiver ids [0]``, an option the user never gave (issue 27):
  ``--http`` not given now follows the relay's family, and given in the other family it works
  (the relay's internal side takes the transceiver's family).
"""

from __future__ import annotations

import ipaddress
import socket

import aioice.ice
import pytest
from click.testing import CliRunner

from rtcedge.checks import UpAddresses, UpBackend, check_up_options, default_route_address
from rtcedge.cli import main
from testbed.ports import free_port
from tests.support.tone_call import run_client
from tests.support.up import running_up
from tests.support.waits import run
from tests.support.whip import make_offer, post

CALL_S = 1.5


def candidates(sdp: str) -> list[str]:
    """The connection addresses of the answer's candidates."""
    return [line.split()[4] for line in sdp.splitlines() if line.startswith("a=candidate:")]


def answer_candidates(url: str) -> set[str]:
    status, answer, _ = run(post(url, run(make_offer())))
    assert status == 201, answer
    return set(candidates(answer))  # one per media section


def calls_from(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """The aiortc caller's only host candidate is ``host`` (aioice leaves out loopback)."""
    monkeypatch.setattr(aioice.ice, "get_host_addresses", lambda use_ipv4, use_ipv6: [host])


def check_echo_call(url: str, relay: str) -> None:
    """An aiortc call through ``relay`` (ip:port) hears its own tone echoed."""
    call = run(run_client(url, 440, seconds=CALL_S))
    assert call.connected, call.error
    assert call.remote_candidate == relay, call
    assert call.frames_with_own_tone > 0, call


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "[::]"])
def test_a_wildcard_relay_is_advertised_under_the_default_routes_address(wildcard, monkeypatch):
    family = socket.AF_INET6 if ":" in wildcard else socket.AF_INET
    loopback = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    expected = default_route_address(family) or loopback  # no route: `up` takes loopback
    calls_from(monkeypatch, expected)  # a caller on this machine, calling from that address
    relay_port = free_port(loopback)
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    with running_up("--http", http, "--relay", f"{wildcard}:{relay_port}") as ready:
        assert f"advertised as {expected}" in ready, ready
        found = answer_candidates(f"http://{http}")
        assert found == {expected}, found
        assert not any(ipaddress.ip_address(c).is_unspecified for c in found)
        check_echo_call(f"http://{http}", f"{expected}:{relay_port}")


def test_a_wildcard_relay_is_advertised_under_advertise(monkeypatch):
    calls_from(monkeypatch, "127.0.0.1")
    relay_port = free_port("127.0.0.1")
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    with running_up(
        "--http", http, "--relay", f"0.0.0.0:{relay_port}", "--advertise", "127.0.0.1"
    ) as ready:
        assert "advertised as 127.0.0.1 (--advertise)" in ready, ready
        assert answer_candidates(f"http://{http}") == {"127.0.0.1"}
        check_echo_call(f"http://{http}", f"127.0.0.1:{relay_port}")


def test_the_whole_stack_runs_on_ipv6_loopback(monkeypatch):
    calls_from(monkeypatch, "::1")
    relay_port = free_port("::1")
    http_port = free_port("::1", socket.SOCK_STREAM)
    with running_up("--http", f"[::1]:{http_port}", "--relay", f"[::1]:{relay_port}") as ready:
        url = f"http://[::1]:{http_port}"
        assert f"open {url}/" in ready, ready
        assert answer_candidates(url) == {"::1"}
        check_echo_call(url, f"::1:{relay_port}")


def test_an_ipv6_relay_in_front_of_an_ipv4_transceiver_carries_a_call(monkeypatch):
    calls_from(monkeypatch, "::1")
    relay_port = free_port("::1")
    http = f"127.0.0.1:{free_port('127.0.0.1', socket.SOCK_STREAM)}"
    with running_up("--http", http, "--relay", f"[::1]:{relay_port}") as ready:
        assert "transceiver media udp 127.0.0.1:" in ready, ready
        assert answer_candidates(f"http://{http}") == {"::1"}
        check_echo_call(f"http://{http}", f"::1:{relay_port}")


def test_an_ipv6_relay_alone_serves_the_page_on_ipv6_loopback(monkeypatch):
    """``--relay '[::1]:P'`` without ``--http``: the page on ``[::1]:8080``, the default port on
    the relay's family (the ports are not bound here: 8080 may be another program's)."""
    started: list[UpAddresses] = []
    monkeypatch.setattr(UpAddresses, "check_ports_free", lambda self: None)
    monkeypatch.setattr("rtcedge.up.run_local", lambda addresses, *_: started.append(addresses))
    result = CliRunner().invoke(main, ["up", "--relay", "[::1]:3478"], prog_name="rtcedge")
    assert result.exit_code == 0, result.output
    assert started[0].http == ("::1", 8080) and started[0].internal_host == "::1"
    ipv4 = check_up_options(None, "127.0.0.1:3478", 2, UpBackend(), None)
    assert ipv4.http == ("127.0.0.1", 8080), "an IPv4 relay keeps the IPv4 default"
