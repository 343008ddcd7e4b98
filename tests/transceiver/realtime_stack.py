"""The realtime browser test's stack: the example voice agent, and a relay + transceiver whose
``--backend realtime`` calls it, on loopback, until SIGTERM.

    python -m tests.transceiver.realtime_stack --http HOST:PORT --relay HOST:PORT \\
        --log-events FILE [--realtime-key-file FILE] [--token-secret-file FILE] [agent options]

What ``rtcedge up`` is for the echo page, for ``realtime_harness`` (its ``--stack``): it prints a
line with ``ready`` once a call can be made, and stops everything it started, by PID, on SIGTERM
or when one of them exits. The processes are the testbed's (testbed/processes.py) and the agent
is ``tests.support.voice_agent.running_agent``; the operator's API keys and the token secret are
files handed to the transceiver (never on a command line); the agent logs every event it gets
and sends to ``--log-events``, where the test reads the truncate it received.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading

from common.config import parse_host_port
from testbed.processes import NO_LOAD_GATE, RelayProcess, TransceiverProcess, started_in_order
from tests.support.voice_agent import running_agent

MODEL = "agent"  # the model the backend URL names; the agent takes any


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http", required=True, help="HOST:PORT of the page and signaling")
    parser.add_argument("--relay", required=True, help="HOST:PORT of the relay's public UDP")
    parser.add_argument("--log-events", required=True, help="the agent's event log (JSON lines)")
    parser.add_argument("--realtime-key-file", help="the operator's API keys, for the transceiver")
    parser.add_argument("--token-secret-file", help="the client secrets' signing secret")
    parser.add_argument("--speed", help="the agent's --speed (answer audio per wall second)")
    return parser.parse_args(argv)


def transceiver_args(args: argparse.Namespace, agent_url: str) -> list[str]:
    """The transceiver's options beyond the testbed's: the backend, and the secrets' files."""
    extra = ["--backend", "realtime", "--backend-url", f"{agent_url}?model={MODEL}"]
    # Only the relay's internal sockets may send encapsulated datagrams (as `rtcedge up`).
    extra += ["--drain-grace", "1", "--log-level", "info", "--relay-network", "127.0.0.1"]
    # Load admission is not what this stack is for, and Chromium starting beside it on a small
    # shared machine makes the event loop late enough to refuse the one call (503).
    extra += NO_LOAD_GATE
    for option in ("realtime_key_file", "token_secret_file"):
        path = getattr(args, option)
        if path:
            extra += [f"--{option.replace('_', '-')}", path]
    return extra


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    agent_args = ["--log-events", args.log_events]
    if args.speed:
        agent_args += ["--speed", args.speed]
    http_host, http_port = parse_host_port("--http", args.http)
    relay_host, relay_port = parse_host_port("--relay", args.relay)
    with running_agent(*agent_args) as agent:
        relay = RelayProcess({}, host=relay_host, quiet=False, die_with_parent=True)
        relay.port = relay_port  # the harness's: the page's answer names it
        trx = TransceiverProcess(
            relay,
            host=http_host,
            extra_args=transceiver_args(args, agent.url),
            quiet=False,
            die_with_parent=True,
        )
        trx.http_port = http_port
        relay.transceivers = {trx.tid: trx.media_address}
        with started_in_order(relay, trx):
            print(f"realtime stack: ready at {trx.url} (agent {agent.url})", flush=True)
            while not stop.wait(0.2):
                for name, proc in (("relay", relay.proc), ("transceiver", trx.proc)):
                    if proc is not None and proc.poll() is not None:
                        print(f"realtime stack: {name} exited ({proc.returncode})", flush=True)
                        stop.set()
                if agent.process.poll() is not None:
                    print(f"realtime stack: the agent exited ({agent.process.returncode})")
                    stop.set()
        with contextlib.suppress(Exception):
            sys.stderr.write("".join(agent.stderr[-20:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
