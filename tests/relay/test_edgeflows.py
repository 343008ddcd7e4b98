"""The sans-I/O parts of relay tiers: peer flows, route failover, the cluster map's config."""

from __future__ import annotations

import itertools

import pytest

from common.config import ConfigError
from relay.cli import build_config, serve
from relay.edgeflows import EdgeFlowTable
from relay.flows import ROUTE_ID_BASE, FlowLimits, FlowTable, route_id
from relay.journal import FlowJournal
from relay.routehealth import RouteHealth


class FakeTarget:
    def __init__(self, tid: int) -> None:
        self.tid = tid


T0, T1 = FakeTarget(0), FakeTarget(1)
EDGE_A, EDGE_B = b"edge-a", b"edge-b"


def table(**limits) -> EdgeFlowTable:
    return EdgeFlowTable(FlowLimits(**limits), path_ttl_s=10)


# -- peer flows ---------------------------------------------------------------------------------
def test_a_peer_flow_is_pending_until_its_target_answers_and_follows_the_latest_edge():
    t = table()
    flow = t.admit(1, "hint", T0, EDGE_A, now=100)
    assert not flow.confirmed and t.count_pending() == 1
    t.heard(1, flow, EDGE_B, now=101)
    assert flow.edge == EDGE_B, "the latest edge wins"
    t.confirm(1, flow, T1)
    assert flow.confirmed and flow.target is T1 and t.count_pending() == 0


def test_replies_go_back_through_the_edge_only_while_it_was_heard_recently():
    t = table()
    flow = t.admit(1, "hint", T0, EDGE_A, now=100)
    assert t.live(flow, 110)
    assert not t.live(flow, 111), "after --peer-path-ttl: the direct path"
    t.heard(1, flow, EDGE_A, now=111)
    assert t.live(flow, 111)


def test_unconfirmed_flows_expire_after_the_pending_ttl_and_idle_ones_after_the_idle_ttl():
    t = table(pending_ttl_s=10, idle_ttl_s=45)
    pending = t.admit(1, "h1", T0, EDGE_A, now=100)
    confirmed = t.admit(2, "h2", T0, EDGE_A, now=100)
    t.confirm(2, confirmed, T0)
    t.heard(1, pending, EDGE_A, now=105)  # refreshing does not extend the pending TTL
    assert t.expire(109) == 0
    assert t.expire(110) == 1 and t.get(1) is None
    t.heard(2, confirmed, EDGE_A, now=120)
    assert t.expire(164) == 0
    assert t.expire(165) == 1 and not t.flows
    assert t.expired == 2


def test_a_hint_holds_a_bounded_number_of_peer_flows_evicting_its_idlest():
    t = table(max_flows_per_hint=3)
    for key in range(3):
        t.admit(key, "hint", T0, EDGE_A, now=100 + key)
    t.heard(0, t.flows[0], EDGE_A, now=110)  # key 1 is now the idlest
    t.admit(9, "hint", T0, EDGE_A, now=111)
    assert sorted(t.flows) == [0, 2, 9] and t.evicted == 1


def test_a_worker_holds_a_bounded_number_of_peer_flows_evicting_the_idlest():
    t = table(max_confirmed_flows=100)
    for key in range(1000):  # an edge naming ever new clients, each with a hint
        t.admit(key, f"hint{key}", T0, EDGE_A, now=key)
    assert len(t.flows) == 100 and next(iter(t.flows)) == 900
    assert t.evicted == 900


def test_flows_of_a_target_that_left_are_forgotten():
    t = table()
    t.admit(1, "a", T0, EDGE_A, now=1)
    t.admit(2, "b", T1, EDGE_A, now=1)
    assert t.remove_target(0) == 1 and list(t.flows) == [2]


def test_confirming_reports_only_a_new_or_re_pointed_flow():
    t = table()
    flow = t.admit(1, "hint", T0, EDGE_A, now=1)
    assert t.confirm(1, flow, T0), "confirmed: journal and store it"
    assert not t.confirm(1, flow, T0), "every further reply: nothing to write"
    assert t.confirm(1, flow, T1), "re-pointed: write it again"


def test_a_restored_flow_is_confirmed_has_no_hint_and_counts_against_the_worker_cap():
    t = table(max_confirmed_flows=2)
    t.admit(1, "hint", T0, EDGE_A, now=1)
    flow = t.restore(2, T1, EDGE_B, now=2)
    assert flow is not None and flow.confirmed and flow.ufrag is None and flow.edge == EDGE_B
    assert t.restore(2, T0, EDGE_A, now=2) is None, "a client with a flow keeps it"
    assert t.restore(3, T0, EDGE_A, now=3) is not None
    assert sorted(t.flows) == [2, 3] and t.evicted == 1 and t.restored == 2
    assert t.expire(100) == 2 and not t.flows


def test_a_journalled_flow_that_leaves_releases_its_slot():
    t = table(max_confirmed_flows=1)
    flow = t.restore(1, T0, EDGE_A, now=1)
    assert flow is not None
    flow.slot = 7
    t.restore(2, T0, EDGE_A, now=2)  # evicts flow 1
    assert t.released == [7] and flow.slot == -1


# -- route failover -----------------------------------------------------------------------------
def nonces():
    counter = itertools.count()
    return lambda: next(counter).to_bytes(8, "big")


def test_an_address_is_down_after_three_unanswered_probes_and_up_on_one_answer():
    health = RouteHealth(2, nonce=nonces())
    for _ in range(3):
        due = health.probe_round()
        assert [i for i, _ in due] == [0, 1]
        health.answered(due[1][1])  # only the second address answers
        assert health.current == 0, "not yet: fewer than 3 probes unanswered"
    health.probe_round()  # the third unanswered probe of address 0
    assert health.current == 1 and health.failovers == 1
    due = health.probe_round()
    assert health.answered(due[0][1])  # address 0 answers again
    assert health.current == 0 and health.failovers == 2


def test_all_addresses_down_keeps_the_first_and_stale_nonces_are_ignored():
    health = RouteHealth(2, nonce=nonces())
    for _ in range(5):
        health.probe_round()
    assert not health.up(0) and not health.up(1) and health.current == 0
    assert not health.answered(b"\xff" * 8)


def test_an_answer_slower_than_the_probe_interval_still_counts():
    health = RouteHealth(1, nonce=nonces())
    for _ in range(10):
        ((_, nonce),) = health.probe_round()
        late = nonce
        health.probe_round()
        assert health.answered(late)  # the answer to the round before
    assert health.up(0)


# -- the flow table and the journal with routes -------------------------------------------------
def test_a_route_is_not_bounded_by_the_per_transceiver_cap():
    flows = FlowTable(FlowLimits(max_flows_per_transceiver=2))
    for key in range(5):
        flows.confirm(key, route_id(1), now=1)
    assert flows.count_of_target(route_id(1)) == 5
    assert flows.evicted["confirmed", "transceiver"] == 0


def test_the_journal_keeps_route_target_ids():
    journal = FlowJournal(4)
    list(journal.attach())
    journal.write(b"k" * 24, ROUTE_ID_BASE + 255)
    journal.write(b"x", 65535)
    assert sorted(tid for _, _, tid in journal.attach()) == [65535, ROUTE_ID_BASE + 255]


def test_a_peer_journal_keeps_each_record_s_edge():
    journal = FlowJournal(4, extra_len=28)  # an IPv6 sockaddr
    assert journal.record_len == 64
    list(journal.attach())
    edge = bytes(range(28))
    slot = journal.write(b"k" * 24, 3, extra=b"short")
    journal.write(b"k" * 24, 4, slot=slot, extra=edge)  # heard through another edge
    other = journal.write(b"x", 5, extra=b"e")
    assert sorted(journal.attach()) == sorted([(slot, b"k" * 24, 4), (other, b"x", 5)])
    assert journal.extra(slot) == edge and journal.extra(other) == b"e"
    with pytest.raises(ValueError):
        journal.write(b"y", 1, extra=bytes(29))


# -- configuration ------------------------------------------------------------------------------
def parsed(*args: str):
    base = ["--metrics", "off", "--keyring-json", "{}", "--cluster", "1"]
    return build_config(serve.make_context("serve", [*base, *args]).params)


def test_an_edge_needs_no_transceiver_and_parses_routes_in_order():
    cfg = parsed("--route", "2=127.0.0.1:5001,127.0.0.1:5002", "--route", "3=127.0.0.1:6000")
    assert cfg.routes == {2: (("127.0.0.1", 5001), ("127.0.0.1", 5002)), 3: (("127.0.0.1", 6000),)}
    assert cfg.peer_listen is None and cfg.route_probe_interval_s == 1.0


def test_a_route_for_the_own_cluster_is_a_config_error():
    with pytest.raises(ConfigError, match="--route"):
        parsed("--route", "1=127.0.0.1:5001")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--route", "2"], "--route"),
        (["--route", "300=127.0.0.1:1"], "--route"),
        (["--route", "2=127.0.0.1:1", "--route", "2=127.0.0.1:2"], "--route"),
        (["--route", "2=::1:5000"], "--route"),  # not --internal's family
        (["--route", "2=127.0.0.1:1", "--route-probe-interval", "0"], "--route-probe-interval"),
        (["--transceiver", "0=127.0.0.1:1", "--peer-listen", "127.0.0.1:7000"], "--peer-network"),
        (["--transceiver", "0=127.0.0.1:1", "--peer-network", "10.0.0.0/8"], "--peer-network"),
        (["--transceiver", "0=127.0.0.1:1", "--peer-path-ttl", "0"], "--peer-path-ttl"),
        ([], "--transceiver"),
    ],
)
def test_bad_tier_options_name_the_option(args, option):
    with pytest.raises(ConfigError) as exc:
        parsed(*args)
    assert exc.value.option == option


def test_a_cluster_relay_takes_its_peer_ingress_and_networks():
    cfg = parsed(
        "--transceiver", "0=127.0.0.1:1",
        "--peer-listen", "127.0.0.1:7000",
        "--peer-network", "10.0.0.0/8,127.0.0.0/8",
    )  # fmt: skip
    assert cfg.peer_listen == ("127.0.0.1", 7000)
    assert [str(n) for n in cfg.peer_networks] == ["10.0.0.0/8", "127.0.0.0/8"]
