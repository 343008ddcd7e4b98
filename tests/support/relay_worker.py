"""A relay worker in-process on real loopback sockets, driven by calling its methods (no loop, no
clock), the slots of its drop counters, and reading what was sent to it."""

from __future__ import annotations

from collections.abc import Callable

from common.hint import Keyring
from relay.addresspolicy import LOOPBACK_NETWORKS
from relay.config import RelayConfig, parse_networks
from relay.control import ControlBlock, RoutingConfig
from relay.counters import DROP_INDEX, DROPS, CounterArea
from relay.journal import FlowJournal
from relay.supervisor import open_sockets
from relay.worker import Worker
from testbed.ports import free_port
from tests.support.waits import wait_for

# Drop reason -> its index in a worker's counter block.
DROP_SLOT = {reason: DROPS + i for reason, i in DROP_INDEX.items()}


def make_worker(
    targets: dict[int, tuple[str, int]],
    allow: tuple[str, ...] = LOOPBACK_NETWORKS,
    listen: tuple[str, int] = ("127.0.0.1", 0),
    **config: object,
) -> tuple[Worker, Keyring]:
    """A worker on real loopback sockets, driven by calling its methods (no loop, no clock)."""
    keyring = Keyring.generate(1)
    cfg = RelayConfig(
        listen=listen,
        internal_host="127.0.0.1",
        internal_port_base=free_port(),
        cluster=0,
        keyring_json=keyring.to_json(),
        transceivers=targets,
        workers=1,
        allow_networks=parse_networks("--allow-network", allow),
        **config,  # type: ignore[arg-type]
    ).validate()
    ((public, internal),) = open_sockets(cfg)
    control = ControlBlock(capacity=1 << 16)
    control.publish(RoutingConfig(keyring, targets).to_json())
    worker = Worker(0, cfg, public, internal, CounterArea(1).block(0), FlowJournal(64), control)
    worker.start()
    return worker, keyring


def read_all(read: Callable[[], int], datagrams: int, timeout_s: float = 3.0) -> None:
    """Call a worker's batch reader (``_from_clients`` or ``_from_transceivers``) until it has read
    the ``datagrams`` a test sent: polls for them as they arrive instead of sleeping first."""
    done = 0

    def step() -> bool:
        nonlocal done
        done += read()
        return done >= datagrams

    assert wait_for(step, True, timeout_s), f"the worker read {done} of {datagrams} datagrams"
