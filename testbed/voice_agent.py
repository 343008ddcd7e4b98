"""The example voice agent (examples/voice_agent/agent.py) as a child process on loopback: the
Realtime-compatible model server ``rtcedge up --agent`` puts behind its transceiver.

It binds a free port itself (``--listen 127.0.0.1:0``: no port found free and then taken by
someone else) and names it in its ``ready ws://...`` line, which is read with a deadline. Its key
goes in a file only its owner reads, removed once the agent has read it; the key itself is on no
command line. It runs outside the package (its modules import each other as siblings), so it
works only from a source checkout, as testbed/ does. Beside it: its modules (``agent_module``)
and speech said in its voice (``spoken``), for the tests and the turn benchmark.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from common.lifetime import parent_death_preexec
from testbed.processes import stop_process

AGENT = Path(__file__).resolve().parents[1] / "examples" / "voice_agent" / "agent.py"
AGENT_DIR = AGENT.parent
# What agent.py needs besides the project's own dependencies: the ``agent`` extra's modules
# and Debian's espeak-ng.
MODULES = ("pocketsphinx", "webrtcvad", "numpy")
INSTALL = "pip install -e '.[agent]' and apt-get install espeak-ng"
MODEL = "rtcedge-voice-agent"  # the name it answers to (any model is this one)
READY_TIMEOUT_S = 60.0  # imports and pocketsphinx's model, on a busy machine (1-2 s idle)


def agent_module(name: str) -> ModuleType:
    """One of the agent's modules (``conversation``, ``pcm``...): they import each other as
    siblings, so their folder goes on ``sys.path``."""
    if str(AGENT_DIR) not in sys.path:
        sys.path.insert(0, str(AGENT_DIR))
    return importlib.import_module(name)


def spoken(text: str, rate_hz: int = 24_000) -> bytes:
    """``text`` said by espeak-ng (its en-us voice, as the agent's), as PCM16 mono at
    ``rate_hz`` (24 kHz: the Realtime API's; 48 kHz: a WebRTC caller's Opus), resampled by
    the agent's own resampler."""
    pcm = agent_module("pcm")
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "--stdout"], input=text.encode(), capture_output=True,
        check=True, timeout=10,
    ).stdout  # fmt: skip
    source_hz, audio = pcm.wav_pcm(wav)
    return pcm.resample(audio, source_hz, rate_hz)


def agent_missing() -> list[str]:
    """What the agent cannot run without here (empty: it can run)."""
    missing = [] if AGENT.is_file() else [str(AGENT)]
    missing += [name for name in MODULES if importlib.util.find_spec(name) is None]
    if shutil.which("espeak-ng") is None:
        missing.append("espeak-ng")
    return missing


@dataclass
class VoiceAgentProcess:
    """``agent.py --listen 127.0.0.1:0 --key-file ...`` until ``stop``; ``url`` once started."""

    extra_args: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    # SIGTERM to the agent when the thread that started it exits (common/lifetime.py).
    die_with_parent: bool = False
    key: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    url: str = ""
    stderr_path: Path | None = None  # its log goes there (a benchmark's many calls), else ours
    label: str = "the voice agent"  # in its errors (a subclass runs another server)

    def __post_init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def command(self, key_file: str) -> list[str]:
        return [sys.executable, str(AGENT), "--listen", f"{self.host}:0",
                "--key-file", key_file, *self.extra_args]  # fmt: skip

    def start(
        self, timeout_s: float = READY_TIMEOUT_S, stop: threading.Event | None = None
    ) -> VoiceAgentProcess:
        """Start it and wait for its ready line; RuntimeError if it exits, stays silent for
        ``timeout_s`` or ``stop`` is set first (Ctrl-C while it loads)."""
        with contextlib.ExitStack() as files:
            key_file = files.enter_context(
                tempfile.NamedTemporaryFile("w", prefix="rtcedge-agent-key-")
            )
            key_file.write(self.key)  # mode 0600: tempfile's
            key_file.flush()
            log = files.enter_context(self.stderr_path.open("ab")) if self.stderr_path else None
            self.proc = subprocess.Popen(
                self.command(key_file.name),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                preexec_fn=parent_death_preexec() if self.die_with_parent else None,
            )  # fmt: skip
            line = self._first_line(timeout_s, stop or threading.Event())
        if not line.startswith("ready ws://"):
            assert self.proc is not None
            exited = self.proc.poll()
            self.stop()
            if stop is not None and stop.is_set():
                why = "was stopped before it was ready"
            elif exited is not None:
                why = f"exited with status {exited}"
            else:
                why = f"was not ready within {timeout_s:g} s"
            raise RuntimeError(f"{self.label} {why} (its log is above)")
        self.url = line.split()[1]
        return self

    def _first_line(self, timeout_s: float, stop: threading.Event) -> str:
        """The agent's first line of output, "" if none within ``timeout_s`` or before ``stop``;
        the rest of its output is read and dropped, so that a full pipe never blocks it."""
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        first: list[str] = []
        got = threading.Event()

        def read() -> None:
            first.append(stdout.readline())
            got.set()
            for _ in stdout:
                pass

        threading.Thread(target=read, daemon=True, name="voice-agent-stdout").start()
        deadline = time.monotonic() + timeout_s
        while not got.wait(0.1) and not stop.is_set() and time.monotonic() < deadline:
            pass
        return first[0] if first else ""

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM (it closes its calls and exits), SIGKILL after ``timeout_s``; its status."""
        return None if self.proc is None else stop_process(self.proc, timeout_s)

    @property
    def backend_url(self) -> str:
        """``--backend-url`` for a transceiver in front of it."""
        return f"{self.url}?model={MODEL}"
