"""Target ``aioice``: aioice's STUN parser on what our strict parser lets through.

aioice's ``parse_message`` is meant to raise ValueError on bad input, yet raises ``struct.error``
on some messages our strict parser accepts (attributes of the wrong size). MediaSocket therefore
runs aioice's parser itself and drops what it rejects (``stun_rejected_by_aioice``; the
media_socket target checks that nothing reaches a session that aioice raises on). This target keeps
the list of such inputs current, e.g. after an aioice upgrade: each kind is recorded as an
observation, not a crash, so the run goes on. Inputs are tried as they are and repaired
(fuzz.stunref) so that mutations get past FINGERPRINT.
"""

from __future__ import annotations

import atheris

from fuzz import stunref
from fuzz.fixtures import STUN_KEY
from fuzz.harness import Observations, main

with atheris.instrument_imports(include=["common", "aioice.stun"]):
    from aioice import stun as aioice_stun

    from common import stun

KEY = STUN_KEY
HARMLESS = (
    "known aioice behaviour (docs/fuzzing.md#observations): the transceiver's media socket "
    "drops such datagrams before aioice sees them (stun_rejected_by_aioice)"
)
observations = Observations()


def check(buf: bytes) -> None:
    try:
        stun.parse(buf)
    except stun.StunError:
        return
    try:
        aioice_stun.parse_message(buf)
    except ValueError:
        pass
    except Exception as exc:  # the point of this target: which ones, on which bytes
        observations.record("aioice_raises_on_accepted_stun", exc, buf, why=HARMLESS)


def test_one_input(data: bytes) -> None:
    check(data)
    repaired = stunref.repair(data, KEY)
    if repaired != data:
        check(repaired)


if __name__ == "__main__":
    main(test_one_input)
