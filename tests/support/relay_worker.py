"""A relay worker in-process on real loopback sockets, driven by calling its methods (no loop, no
clock), and the slots of its drop counters."""

from __future__ import annotations

import time

from bench.peers import free_port
from common.hint import Keyring
from relay.addresspolicy import LOOPBACK_NETWORKS
from relay.config import RelayConfig, parse_networks
from relay.control import ControlBlock, RoutingConfig
from relay.counters import DROP_INDEX, DROPS, CounterArea
from relay.journal import FlowJournal
from relay.supervisor import open_sockets
from relay.worker import Worker

# Drop reason -> its index in a worker's counter block.
DROP_SLOT = {reason: DROPS + i for reason, i in DROP_INDEX.items()}


def make_worker(
    targets: dict[int, tuple[str, int]],
    allow: tuple[str, ...] = LOOPBACK_NETWORKS,
    **config: object,
) -> tuple[Worker, Keyring]:
    """A worker on real loopback sockets, driven by calling its methods (no loop, no clock)."""
    keyring = Keyring.generate(1)
    cfg = RelayConfig(
        listen=("127.0.0.1", 0),
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
    worker.tick(int(time.monotonic()))
    worker.restore_journal()
    return worker, keyring
