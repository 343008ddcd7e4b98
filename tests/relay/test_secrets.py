"""Secrets never go on a command line: every local user reads /proc/PID/cmdline (``ps``)."""

from __future__ import annotations

import base64
from pathlib import Path

from testbed.processes import RelayProcess, TransceiverProcess


def secrets_of(relay: RelayProcess) -> list[bytes]:
    """Every spelling of the keyring a command line could carry: its JSON and each secret."""
    spellings = [relay.keyring.to_json().encode()]
    for secret in relay.keyring.keys.values():
        spellings += [secret, base64.b64encode(secret), secret.hex().encode()]
    return spellings


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_started_relay_and_transceiver_show_no_key_on_their_command_lines():
    relay = RelayProcess({}, workers=1, pin=False)
    trx = TransceiverProcess(relay)
    relay.transceivers = {0: trx.media_address}
    with relay, trx:
        assert relay.proc is not None and trx.proc is not None
        pids = {"relay": relay.proc.pid, "transceiver": trx.proc.pid}
        pids |= {f"relay worker {i}": pid for i, pid in enumerate(relay.worker_pids())}
        assert len(pids) == 3
        for name, pid in pids.items():
            line = cmdline(pid)
            assert b"serve" in line, (name, line)
            for secret in secrets_of(relay):
                assert secret not in line, f"{name} shows its keyring on its command line"
        assert relay.http("/readyz")[0] == 200 and trx.http("/readyz")[0] == 200
