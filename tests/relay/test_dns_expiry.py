"""The relay forgets a transceiver whose name stopped resolving, after a grace period (finding 8).

Sans-I/O: a fake resolver (a dict of answers) and ``now`` passed in. The grace exists because a
DNS blip must not drop calls; the bound exists because a name that stays gone is a pod that is
gone, whose IP another pod may get.
"""

from __future__ import annotations

import pytest

from common.config import ConfigError
from relay.allowlist import AllowlistResolver
from relay.cli import build_config
from relay.cli import main as relay_main
from tests.support.relay_config import relay_config

INTERVAL_S, GRACE_S = 10.0, 60.0


class FakeDns:
    """name -> address; a missing name fails as NXDOMAIN or a timeout would (OSError)."""

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.answers = dict(answers or {})

    def __call__(self, host: str, port: int, family: int) -> str:
        if host not in self.answers:
            raise OSError(f"cannot resolve {host}")
        return self.answers[host]


def resolver(dns: FakeDns, **kw) -> AllowlistResolver:
    options = dict(
        transceiver_dns="t-{id}.svc:5000",
        transceiver_ids=(0, 1),
        dns_interval_s=INTERVAL_S,
        dns_grace_s=GRACE_S,
    )
    config = relay_config(**{**options, **kw}).validate()
    return AllowlistResolver(config, resolver=dns)


def run(r: AllowlistResolver, start_s: float, end_s: float) -> dict[float, dict]:
    """Refresh every interval from ``start_s`` to ``end_s`` (the supervisor's DNS loop)."""
    out, now = {}, start_s
    while now <= end_s:
        out[now] = r.refresh(now)
        now += INTERVAL_S
    return out


def test_a_dns_blip_shorter_than_the_grace_keeps_the_transceiver():
    dns = FakeDns({"t-0.svc": "10.0.0.1", "t-1.svc": "10.0.0.2"})
    r = resolver(dns)
    assert r.refresh(0.0) == {0: ("10.0.0.1", 5000), 1: ("10.0.0.2", 5000)}
    dns.answers.clear()  # the cluster DNS is down for 60 s: six failed lookups in a row
    for now, allowlist in run(r, 10.0, 60.0).items():
        assert allowlist == {0: ("10.0.0.1", 5000), 1: ("10.0.0.2", 5000)}, now
    assert r.errors == 12 and r.expired == 0
    dns.answers.update({"t-0.svc": "10.0.0.1", "t-1.svc": "10.0.0.2"})
    assert r.refresh(70.0) == {0: ("10.0.0.1", 5000), 1: ("10.0.0.2", 5000)}
    dns.answers.clear()  # the grace counts from the last good answer, not the first failure
    assert run(r, 80.0, 130.0)[130.0] == {0: ("10.0.0.1", 5000), 1: ("10.0.0.2", 5000)}


def test_a_name_gone_longer_than_the_grace_is_removed_and_may_come_back():
    dns = FakeDns({"t-0.svc": "10.0.0.1", "t-1.svc": "10.0.0.2"})
    r = resolver(dns)
    r.refresh(0.0)
    del dns.answers["t-1.svc"]  # pod 1 deleted (scaled down): its IP returns to the pool
    seen = run(r, 10.0, 80.0)
    assert seen[60.0] == {0: ("10.0.0.1", 5000), 1: ("10.0.0.2", 5000)}  # within the grace
    assert seen[70.0] == {0: ("10.0.0.1", 5000)}  # 70 s > 60 s since it last resolved
    assert seen[80.0] == {0: ("10.0.0.1", 5000)}
    assert r.expired == 1 and 1 not in r.resolved_at_s
    dns.answers["t-1.svc"] = "10.0.0.9"  # scaled up again: a new pod, a new IP
    assert r.refresh(90.0) == {0: ("10.0.0.1", 5000), 1: ("10.0.0.9", 5000)}


def test_a_name_that_never_resolved_is_never_allowlisted():
    dns = FakeDns({"t-0.svc": "10.0.0.1"})
    r = resolver(dns)
    assert all(a == {0: ("10.0.0.1", 5000)} for a in run(r, 0.0, 200.0).values())
    assert r.expired == 0


def test_the_grace_must_cover_more_than_one_lookup():
    with pytest.raises(ConfigError, match="--dns-grace"):
        resolver(FakeDns(), dns_grace_s=15.0)  # < 2 x 10 s: one failed lookup would remove it
    serve = relay_main.commands["serve"]
    base = ["--keyring-json", "{}", "--transceiver-dns", "t-{id}.svc:5000"]
    base += ["--transceiver-ids", "0-1", "--metrics", "off"]
    params = serve.make_context("serve", list(base)).params  # (click consumes the list)
    assert build_config(params).dns_grace_s == 60.0  # the default
    params = serve.make_context("serve", [*base, "--dns-interval", "5", "--dns-grace", "30"]).params
    assert build_config(params).dns_grace_s == 30.0
