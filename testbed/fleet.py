"""A fleet that moves calls on scale-down (docs/transceiver.md, "Moving calls on scale-down"):
transceivers behind one relay, each told every transceiver's WHIP address (``--peer-http``), so
that a resume offer landing on any of them can claim its call from the draining owner. The
scale-down benchmark (``bench.scaledown``), the migration test and the browser test build it
with ``migrating_fleet``.

``python -m testbed.fleet --http HOST:PORT --relay HOST:PORT`` runs one as a stack (the browser
test's ``--migrate`` stack): the relay on that UDP port, ``--transceivers`` transceivers on free
loopback ports, and a round-robin front (``testbed.front``) on the HTTP address, which serves the
page and takes its WHIP requests as a load-balanced Service would. It prints one
``stack: {json}`` line (the front's URL; each transceiver's id, PID, WHIP and metrics URLs),
then a line with ``ready``. A transceiver that exits (scaled down) is reported with its status
and the rest keep serving; SIGTERM, SIGINT or SIGHUP stop everything it started, by PID, and if
it dies without cleaning up its children get the parent-death signal (common/lifetime.py). The
transceivers log at info level to its stderr: how each session ended is in their lines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
from typing import Any

from common.config import ConfigError, format_host_port, parse_host_port
from testbed.front import RoundRobinFront
from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess, started_in_order

STACK_LINE = "stack: "  # the prefix of the line describing the running stack (JSON follows)


def migrating_fleet(
    relay: RelayProcess,
    count: int,
    migrate_deadline_s: float,
    drain_grace_s: float | None = None,
    **transceiver_options: Any,
) -> list[TransceiverProcess]:
    """``count`` transceivers (ids 0..count-1) behind ``relay`` (not started yet), each knowing
    every one's WHIP port; ``relay`` is told their media addresses. No quota per client (the
    callers all come from loopback). ``transceiver_options``: for each TransceiverProcess."""
    trxs = [TransceiverProcess(relay, tid=t, **transceiver_options) for t in range(count)]
    # Each port was drawn alone (bound, closed): two draws may name the same one.
    taken = {relay.metrics_port}
    for t in trxs:
        for attr in ("http_port", "metrics_port"):
            while getattr(t, attr) in taken:
                setattr(t, attr, free_port(t.host, socket.SOCK_STREAM))
            taken.add(getattr(t, attr))
    peers = [f"--peer-http={t.tid}={format_host_port(t.host, t.http_port)}" for t in trxs]
    grace = [] if drain_grace_s is None else ["--drain-grace", str(drain_grace_s)]
    for t in trxs:
        t.extra_args = [*peers, "--relay-network", relay.host, "--client-rate", "0",
                        "--migrate-deadline", str(migrate_deadline_s), *grace,
                        *t.extra_args]  # fmt: skip
    relay.transceivers = {t.tid: t.media_address for t in trxs}
    return trxs


def describe(front_url: str, relay: RelayProcess, trxs: list[TransceiverProcess]) -> dict:
    """What the ``stack:`` line says: where everything is, and the PIDs to scale down."""
    assert relay.proc is not None
    return {
        "front": front_url,
        "relay": {"address": format_host_port(*relay.address), "pid": relay.proc.pid},
        "transceivers": [
            {
                "id": t.tid,
                "pid": t.proc.pid if t.proc else None,
                "url": t.url,
                "metrics": f"http://{format_host_port(t.host, t.metrics_port)}",
            }
            for t in trxs
        ],
    }


async def serve(http: tuple[str, int], relay: RelayProcess, trxs: list[TransceiverProcess]) -> int:
    """Run the front until a stop signal; report transceivers that exit. 1 if the relay did."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    front = RoundRobinFront([t.url for t in trxs])
    url = await front.start(*http)
    print(STACK_LINE + json.dumps(describe(url, relay, trxs)), flush=True)
    print(f"testbed.fleet: ready - open {url}/ ({len(trxs)} transceivers behind it)", flush=True)
    gone: set[int] = set()
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
            for t in trxs:
                assert t.proc is not None
                if t.tid not in gone and t.proc.poll() is not None:  # reaped here
                    gone.add(t.tid)
                    print(
                        f"testbed.fleet: transceiver {t.tid} (pid {t.proc.pid}) exited with "
                        f"status {t.proc.returncode}",
                        flush=True,
                    )
            assert relay.proc is not None
            if relay.proc.poll() is not None:
                print(f"testbed.fleet: the relay exited with status {relay.proc.returncode}")
                return 1
    finally:
        await front.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="A relay, transceivers that move calls, and a round-robin front (a stack)."
    )
    parser.add_argument("--http", required=True, help="HOST:PORT of the front (the page, WHIP)")
    parser.add_argument("--relay", required=True, help="HOST:PORT of the relay (UDP)")
    parser.add_argument("--transceivers", type=int, default=3)
    parser.add_argument("--migrate-deadline", type=float, default=6.0, help="s")
    parser.add_argument("--drain-grace", type=float, default=10.0, help="s")
    args = parser.parse_args(argv)
    if args.transceivers < 2:
        parser.error("--transceivers: at least 2 (a call moves to another one)")
    try:
        http = parse_host_port("--http", args.http)
        relay_address = parse_host_port("--relay", args.relay)
    except ConfigError as exc:
        parser.error(str(exc))
    # Started from this (main) thread, which lives as long as the stack: the parent-death
    # signal reaches them when it dies.
    relay = RelayProcess({}, workers=1, pin=False, public_host=relay_address[0], quiet=False,
                         die_with_parent=True)  # fmt: skip
    relay.port = relay_address[1]
    trxs = migrating_fleet(relay, args.transceivers, args.migrate_deadline, args.drain_grace,
                           quiet=False, die_with_parent=True,
                           extra_args=["--log-level", "info"])  # fmt: skip
    try:
        with started_in_order(relay, *trxs):
            return asyncio.run(serve(http, relay, trxs))
    except RuntimeError as exc:
        print(f"testbed.fleet: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
