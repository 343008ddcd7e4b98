"""``transceiver serve`` drains on SIGTERM, SIGINT and SIGHUP, as a real process.

SIGHUP is what a closing terminal sends to every process of its group (``rtcedge up`` in a
terminal): the transceiver must drain then too (``/readyz`` 503, no new sessions, live ones get
``--drain-grace``), not die at once without ending its sessions.
"""

from __future__ import annotations

import signal
import time

import pytest

from testbed.processes import RelayProcess, TransceiverProcess
from tests.support.waits import run, wait_for
from tests.support.whip import make_offer, post

GRACE_S = 3.0


SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_signal_drains_then_exits_cleanly(signum: signal.Signals) -> None:
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(
        relay,
        extra_args=[
            "--relay-network", "127.0.0.1/32",
            "--drain-grace", str(GRACE_S),
            "--first-check-timeout", "30",  # the session below lives through the drain
        ],
    )  # fmt: skip
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        status, _, _ = run(post(trx.url, run(make_offer())))
        assert status == 201
        assert trx.metric("rtcedge_transceiver_sessions_active") == 1
        assert trx.proc is not None
        trx.proc.send_signal(signum)
        signalled = time.monotonic()
        assert wait_for(lambda: trx.http("/readyz")[0] == 503, True, 2), "not draining"
        status, body, _ = run(post(trx.url, run(make_offer())))
        assert status == 503, f"a draining transceiver took a session: {status} {body}"
        assert trx.proc.wait(timeout=GRACE_S + 10) == 0
        assert time.monotonic() - signalled >= GRACE_S - 0.5, "the live session got no grace"
