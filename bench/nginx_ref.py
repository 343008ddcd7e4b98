"""nginx's stream UDP proxy as a second reference forwarder for the relay benchmark.

Used only when an ``nginx`` binary with the stream module is found (built in, or as the dynamic
``ngx_stream_module.so`` Debian ships in libnginx-mod-stream); otherwise ``find_nginx`` says why
and the benchmark skips it. nginx runs in the foreground with one worker under a temporary prefix
and is stopped by PID; its worker is the process whose CPU time is measured.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.procfs import children_of


@dataclass(frozen=True)
class NginxBinary:
    path: str
    version: str
    load_module: str | None  # path of ngx_stream_module.so when the module is dynamic


def find_nginx(binary: str | None = None) -> tuple[NginxBinary | None, str]:
    """The nginx to use and a note; None (with the reason in the note) if there is none usable."""
    path = binary or shutil.which("nginx")
    if not path:
        return None, "nginx not found on PATH: nginx reference skipped"
    try:
        out = subprocess.run(
            [path, "-V"], capture_output=True, text=True, timeout=10, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{path} -V failed ({exc}): nginx reference skipped"
    version = out.splitlines()[0] if out else "unknown"
    if re.search(r"--with-stream(\s|$)", out):
        return NginxBinary(path, version, None), f"using {version} (stream built in)"
    # Debian/Ubuntu build the stream module dynamically (--with-stream=dynamic).
    candidates = []
    match = re.search(r"--modules-path=(\S+)", out)
    if match:
        candidates.append(Path(match.group(1)))
    here = Path(path).resolve().parent
    candidates += [
        here.parent / "lib/nginx/modules",
        here.parent / "lib64/nginx/modules",
        here.parent / "share/nginx/modules",
        Path("/usr/lib/nginx/modules"),
        Path("/usr/lib64/nginx/modules"),
        Path("/usr/share/nginx/modules"),
    ]
    for directory in candidates:
        module = directory / "ngx_stream_module.so"
        if module.is_file():
            return NginxBinary(path, version, str(module)), f"using {version} (stream: {module})"
    return None, f"{version} at {path} has no stream module: nginx reference skipped"


def stream_config(
    binary: NginxBinary,
    prefix: Path,
    proxies: list[tuple[tuple[str, int], tuple[str, int]]],
    buffer_bytes: int,
) -> str:
    """One worker; per (listen, upstream) pair a UDP server that never waits for responses."""
    lines = []
    if binary.load_module:
        lines.append(f"load_module {binary.load_module};")
    lines += [
        "worker_processes 1;",
        "daemon off;",
        "master_process on;",
        f"pid {prefix / 'nginx.pid'};",
        f"error_log {prefix / 'error.log'} warn;",
        "events { worker_connections 8192; }",
        "stream {",
    ]
    for (lh, lp), (uh, up) in proxies:
        lines += [
            "    server {",
            f"        listen {lh}:{lp} udp rcvbuf={buffer_bytes};",
            f"        proxy_pass {uh}:{up};",
            "        proxy_responses 0;",
            "    }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


class NginxProxy:
    """nginx stream UDP proxies in the foreground, under a temporary prefix."""

    def __init__(
        self,
        binary: NginxBinary,
        proxies: list[tuple[tuple[str, int], tuple[str, int]]],
        buffer_bytes: int,
    ) -> None:
        self.binary = binary
        self.proxies = proxies
        self.buffer_bytes = buffer_bytes
        self._tmp = tempfile.TemporaryDirectory(prefix="rtcedge-nginx-")
        self.prefix = Path(self._tmp.name)
        (self.prefix / "logs").mkdir()  # nginx opens <prefix>/logs/error.log before the config
        self.conf = self.prefix / "nginx.conf"
        self.conf.write_text(stream_config(binary, self.prefix, proxies, buffer_bytes))
        self.proc: subprocess.Popen[bytes] | None = None

    def _args(self) -> list[str]:
        return [self.binary.path, "-p", f"{self.prefix}/", "-c", str(self.conf)]

    def check(self) -> str | None:
        """None if ``nginx -t`` accepts the configuration, else its complaint."""
        res = subprocess.run(
            [*self._args(), "-t"], capture_output=True, text=True, timeout=20, check=False
        )
        return None if res.returncode == 0 else res.stderr.strip()[-500:]

    def start(self, timeout_s: float = 10.0) -> NginxProxy:
        self.proc = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"nginx exited: {err.strip()[-500:]}")
            if self.worker_pids():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("nginx started no worker")

    def worker_pids(self) -> list[int]:
        return children_of(self.proc.pid) if self.proc else []

    def stop(self) -> None:
        workers = self.worker_pids()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # fast shutdown of master and workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in workers:  # only if the master died before its workers
            with contextlib.suppress(OSError):
                if b"nginx" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._tmp.cleanup()
