"""Target ``aioice``: aioice's STUN parser on what our strict parser lets through.

The transceiver hands STUN to aioice only after ``common.stun.parse`` accepted it (MediaSocket).
aioice's ``parse_message`` is expected to raise ValueError on bad input; any other exception on a
message we accepted is recorded as an observation (not a crash, so the run goes on): it is a
datagram that would reach aioice from the shared socket and raise there. Inputs are tried as they
are and repaired (fuzz.stunref) so that mutations get past FINGERPRINT.
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
        observations.record("aioice_raises_on_accepted_stun", exc, buf)


def test_one_input(data: bytes) -> None:
    check(data)
    repaired = stunref.repair(data, KEY)
    if repaired != data:
        check(repaired)


if __name__ == "__main__":
    main(test_one_input)
