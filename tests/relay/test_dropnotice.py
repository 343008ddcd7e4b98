"""The drop notice's arithmetic, socket-free: the first drops at once, then one line per
interval with the count since the previous line, the rest at stop; never a line for no drops."""

from __future__ import annotations

from relay.dropnotice import DENIED_ADVICE, DropNotice


def notice() -> DropNotice:
    return DropNotice("from denied client addresses (denied_address)", DENIED_ADVICE, 60.0)


def test_nothing_dropped_is_never_logged():
    n = notice()
    assert n.observe(0, 0.0) is None and n.observe(0, 600.0) is None
    assert n.flush(0, 601.0) is None


def test_the_first_drops_are_logged_at_once_then_once_per_interval_with_counts():
    n = notice()
    first = n.observe(3, 10.0)
    assert first is not None
    assert first.startswith("dropped 3 packets from denied client addresses (denied_address)")
    assert "since start (3 in all)" in first and "--allow-network CIDR" in first
    assert n.observe(50, 11.0) is None, "within the interval: counted, not logged"
    assert n.observe(900, 69.0) is None
    later = n.observe(903, 70.0)
    assert later is not None and later.startswith("dropped 900 packets")
    assert "in the last 60 s (903 in all)" in later
    assert n.observe(903, 500.0) is None, "no new drops: no line"


def test_at_stop_the_drops_no_line_accounted_for_are_logged():
    n = notice()
    assert n.observe(1, 0.0) is not None
    assert n.observe(5, 1.0) is None
    rest = n.flush(5, 2.0)
    assert rest is not None and rest.startswith("dropped 4 packets") and "(5 in all)" in rest
    assert n.flush(5, 3.0) is None
