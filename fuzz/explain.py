"""Replay a script input of the demux or media_socket target step by step, saying what happened.

    python -m fuzz.explain media_socket /tmp/rtcedge-fuzz-media_socket-*/artifacts/crash-...
    python -m fuzz.explain demux --hex 0900000c...

For reading a finding: each step, the datagram as the socket got it, drops, deliveries, what was
sent where, and every session's latched path; the finding's message ends the listing.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from fuzz.harness import Finding


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.explain")
    parser.add_argument("target", choices=("demux", "media_socket"))
    parser.add_argument("input", nargs="?", help="a crash or corpus file")
    parser.add_argument("--hex", help="the input as hex instead of a file")
    args = parser.parse_args()
    data = bytes.fromhex(args.hex) if args.hex else Path(args.input).read_bytes()
    harness_module = importlib.import_module(f"fuzz.fuzz_{args.target}")
    from fuzz import script  # after the harness: it imports the modules under test

    config = script.config(data)
    print(f"configuration: {config}")
    harness = harness_module.Harness(config)
    media = getattr(harness, "media", None)
    sent: list[tuple[bytes, tuple]] = []
    if media is not None:
        record = harness.transport.sendto

        def sendto(payload: bytes, dest: tuple) -> None:
            sent.append((bytes(payload), dest))
            record(payload, dest)

        harness.transport.sendto = sendto
    for number, step in enumerate(script.steps(data)):
        print(f"{number:2} {step.describe()}")
        if step.kind != script.CONTROL:
            datagram, addr = script.datagram(step, harness.slots)
            print(f"   datagram from {addr}: {datagram.hex()}")
        sent.clear()
        try:
            harness.run_step(step)
        except Finding as exc:
            print(f"   FINDING: {exc}")
            return 1
        finally:
            if media is not None and step.kind != script.CONTROL:
                print(f"   drops {harness.drops}, delivered to", end=" ")
                print([(s.index, a) for s, _, a in harness.deliveries] or "nobody")
            for payload, dest in sent:
                print(f"   sent {payload.hex()} -> {dest}")
        for slot in harness.slots:
            path = harness.demux.path(slot.ufrag) if slot.present else "ended"
            print(f"   session {slot.index}: {path}")
    print("no finding")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
