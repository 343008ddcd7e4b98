"""``transceiver serve`` with a load the test switches on and off: a thread in the process burns
CPU while a flag file exists, so the transceiver's own CPU share and event-loop lag rise as
they would under too many calls. Run as ``python -m tests.support.busy_transceiver FLAG ARGS...``
(``BusyTransceiverProcess`` does); the product code has no hook for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.processes import TransceiverProcess


def burn_while(flag: Path) -> None:
    """Pure-Python work (it holds the GIL as the loop's own work would) while ``flag`` exists."""
    while True:
        if flag.exists():
            until = time.monotonic() + 0.05
            while time.monotonic() < until:
                pass
        else:
            time.sleep(0.05)


@dataclass
class BusyTransceiverProcess(TransceiverProcess):
    """A TransceiverProcess whose load ``busy(True)`` switches on and ``busy(False)`` off."""

    flag: Path = Path("/nonexistent")

    def command(self) -> list[str]:
        cmd = super().command()
        module = cmd.index("transceiver")
        return [*cmd[: module - 1], "-m", __name__, str(self.flag), *cmd[module + 1 :]]

    def busy(self, on: bool) -> None:
        if on:
            self.flag.touch()
        else:
            self.flag.unlink(missing_ok=True)


if __name__ == "__main__":
    flag = Path(sys.argv[1])
    threading.Thread(target=burn_while, args=(flag,), daemon=True).start()
    from transceiver.cli import main

    sys.argv = ["transceiver", *sys.argv[2:]]
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
