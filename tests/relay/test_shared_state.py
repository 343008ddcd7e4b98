"""Shared-memory pieces a worker inherits: the flow journal and the control block."""

from __future__ import annotations

import os

from common.hint import Keyring
from relay.control import ControlBlock, RoutingConfig
from relay.journal import RECORD_LEN, FlowJournal


def test_journal_survives_into_a_new_attachment():
    j = FlowJournal(8)
    list(j.attach())
    a = j.write(b"\x00\x01\x7f\x00\x00\x01", 3)
    b = j.write(b"\x00\x02\x7f\x00\x00\x01", 4)
    j.clear(a)
    j.write(b"\x00\x02\x7f\x00\x00\x01", 5, slot=b)  # re-pointed in place
    records = list(j.attach())
    assert records == [(b, b"\x00\x02\x7f\x00\x00\x01", 5)]
    assert j.write(b"x", 1) != b, "attach rebuilt the free list without the live slot"


def test_journal_is_visible_across_fork():
    j = FlowJournal(4)
    list(j.attach())
    pid = os.fork()
    if pid == 0:
        j.write(b"child-key", 9)
        os._exit(0)
    os.waitpid(pid, 0)
    assert [(k, t) for _, k, t in j.attach()] == [(b"child-key", 9)]


def test_journal_ignores_torn_records_and_reports_full():
    j = FlowJournal(2)
    list(j.attach())
    j._mv[0] = 1  # live marker with an impossible key length: a torn write
    j._mv[1] = 200
    assert list(j.attach()) == []
    assert j.write(b"a", 1) >= 0 and j.write(b"b", 1) >= 0
    assert j.write(b"c", 1) == -1
    assert RECORD_LEN == 32


def test_control_block_publishes_generations():
    cb = ControlBlock(capacity=4096)
    assert cb.generation() == 0
    routing = RoutingConfig(Keyring.generate(2), {0: ("127.0.0.1", 5000)})
    assert cb.publish(routing.to_json()) == 1
    gen, raw = cb.read()
    assert gen == 1 and RoutingConfig.from_json(raw) == routing
    cb.publish(RoutingConfig(routing.keyring, {}).to_json())
    assert cb.generation() == 2 and RoutingConfig.from_json(cb.read()[1]).transceivers == {}
