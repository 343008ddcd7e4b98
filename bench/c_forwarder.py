"""The C reference forwarder of the relay benchmark's rate mode (``bench/c_forwarder.c``).

The benchmark compiles the C file with the system's C compiler (``cc -O2``) into a cache folder
keyed by the source's hash, and runs it as a child process stopped by PID; without a compiler
``build`` says why and the reference is skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.harness.bounds import poll_until
from testbed.procfs import udp_key, udp_sockets

SOURCE = Path(__file__).with_suffix(".c")


def build(cache_dir: str | None = None) -> tuple[str | None, str]:
    """The compiled forwarder's path and a note; None (with the reason in the note) if it
    cannot be built."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler (cc, gcc) on PATH: the C reference is skipped"
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    folder = Path(cache_dir or Path(tempfile.gettempdir()) / f"rtcedge-bench-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / f"c_forwarder-{digest}"
    if not binary.exists():
        partial = folder / f"{binary.name}.{os.getpid()}.tmp"
        try:
            done = subprocess.run(
                [compiler, "-O2", "-Wall", "-o", str(partial), str(SOURCE)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{compiler} failed ({exc}): the C reference is skipped"
        if done.returncode != 0:
            return None, f"{compiler} failed: {done.stderr.strip()[-300:]}: C reference skipped"
        partial.replace(binary)
    return str(binary), f"C reference: {SOURCE.name} built by {compiler} -O2"


def start(
    binary: str,
    listen: tuple[str, int],
    dest: tuple[str, int],
    max_seconds: float,
    max_packets: int,
    buffer_bytes: int,
) -> subprocess.Popen[bytes]:
    """The forwarder from ``listen`` to ``dest``, once its socket is bound."""
    args = [binary, listen[0], str(listen[1]), dest[0], str(dest[1])]
    args += [f"{max_seconds:.3f}", str(max_packets), str(buffer_bytes)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not poll_until(lambda: udp_key(listen) in udp_sockets(), bool, 10.0, 0.02):
        proc.kill()
        proc.wait(5)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"C forwarder did not start: {err.strip()[-500:]}")
    return proc
