"""Workers die with their supervisor, however it dies: a SIGKILLed relay must not leave workers
holding the public port's SO_REUSEPORT group for the next relay to share unknowingly."""

from __future__ import annotations

import os
import signal

from testbed.ports import free_port
from testbed.processes import RelayProcess
from tests.support.processes import alive, identities, kill_all, udp_port_free
from tests.support.waits import wait_for


def test_workers_end_when_the_supervisor_is_killed() -> None:
    relay = RelayProcess({0: ("127.0.0.1", free_port())}, workers=2).start()
    workers = identities(relay.worker_pids())
    try:
        assert len(workers) == 2
        assert relay.proc is not None
        os.kill(relay.proc.pid, signal.SIGKILL)  # no handler runs: only the kernel can tell them
        relay.proc.wait(timeout=5)
        assert wait_for(lambda: alive(workers), [], 10.0), f"orphaned workers {alive(workers)}"
        assert udp_port_free(*relay.address)
    finally:
        relay.stop()
        kill_all(workers)
