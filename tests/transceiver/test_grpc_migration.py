"""A call on ``--backend grpc`` moves on scale-down (docs/transceiver.md, "Moving calls on
scale-down"): a relay and two transceivers as processes behind a round-robin front, the example
gRPC backend in the test's process, and a real aiortc caller that acts on ``session.migrate``.

SIGTERM the transceiver carrying the call: the caller continues on the other one, whose backend
stream starts with the same session id and ``resumed``; the old stream ends with reason
``migrated``; the caller hears its echo on the new call.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict

import pytest

pytest.importorskip("grpc", reason="the grpc extra: pip install -e '.[grpc]'")

from testbed.callers import EchoCaller
from testbed.fleet import migrating_fleet
from testbed.front import RoundRobinFront
from testbed.ports import free_port
from testbed.processes import RelayProcess, started_in_order
from tests.support.grpc_stack import example, serving
from tests.support.waits import run, wait_until

DEADLINE_S = 6.0  # --migrate-deadline
GRACE_S = 5.0  # the drain grace


class Journal(example().EchoBackend):
    """The example's echo, writing down each call's start and end by session id."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: dict[str, list[bool]] = defaultdict(list)  # resumed, in order
        self.ends: dict[str, list[str]] = defaultdict(list)

    def accept(self, start):
        self.starts[start.session_id].append(start.resumed)
        return super().accept(start)

    def ended(self, start, reason):
        self.ends[start.session_id].append(reason)


def test_a_call_moves_on_scale_down_and_its_backend_stream_resumes_with_the_same_id():
    port = free_port(kind=socket.SOCK_STREAM)
    relay = RelayProcess({}, workers=1, pin=False, cluster=1)
    backend_args = ["--backend", "grpc", "--backend-url", f"grpc://127.0.0.1:{port}"]
    trxs = migrating_fleet(relay, 2, DEADLINE_S, GRACE_S, extra_args=backend_args)
    journal = Journal()

    async def go() -> None:
        front = RoundRobinFront([t.url for t in trxs])
        url = await front.start()
        caller = EchoCaller(migrate=True, hz=440)
        try:
            async with serving(journal, port):
                await caller.connect(url)  # the front's first turn: transceiver 0
                assert await wait_until(lambda: len(journal.starts) == 1, 5)
                (sid,) = journal.starts
                victim = trxs[0]
                assert victim.proc is not None
                victim.proc.terminate()  # SIGTERM: drain, and ask the caller to move
                moved = await wait_until(
                    lambda: bool(caller.moves) and caller.moves[-1].outcome != "under way", 20
                )
                assert moved and caller.moves[-1].outcome == "moved", caller.moves
                assert journal.starts[sid] == [False, True], journal.starts
                assert await wait_until(lambda: journal.ends[sid] == ["migrated"], 10), journal.ends
                started = [e for e in caller.events if e.get("type") == "session.started"]
                assert started[-1] == {"type": "session.started", "session_id": sid,
                                       "resumed": True}  # fmt: skip
                assert await caller.wait_for_echo(time.monotonic(), 10), "audio on the new call"
                assert trxs[1].metric("rtcedge_transceiver_migrations_resumed_total") == 1
        finally:
            await caller.close()
            await front.close()

    with started_in_order(relay, *trxs):
        run(go(), 60)
