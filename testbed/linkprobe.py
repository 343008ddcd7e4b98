"""Probe traffic through an emulated link: what it really delivered, one way, each direction.

A ``LinkProbe`` sends numbered, timestamped datagrams at a steady rate to a proxy
(testbed/linkproxy.py) whose target is the probe's own reflector; the reflector notes each arrival
(delay up) and sends it back stamped (delay down). Sender, reflector and proxy share one clock
(the event loop's, ``time.monotonic``), so delays are one-way, not halves of a round trip.
``check`` compares a direction's figures with the link's settings: the mean delay within
``tolerance`` of the setting, and the loss either within it or, when the probe is too short to
resolve it (a 0.01 % loss needs millions of datagrams), consistent with it (the setting inside
the measured 95 % interval), which the result says.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import statistics
import struct
from typing import Any

from testbed.linkmodel import LinkSpec

Address = tuple[str, int]
_OUT = struct.Struct("!Id")  # sequence number, sent at
_BACK = struct.Struct("!Idd")  # sequence number, sent at, reflected at


class LinkProbe:
    """Probe datagrams to ``via`` (set before ``start``) that reach this probe's reflector."""

    def __init__(
        self, rate_pps: float, count: int, size: int = 100, host: str = "127.0.0.1"
    ) -> None:
        self.rate_pps = rate_pps
        self.count = count
        self.size = max(size, _BACK.size)
        self.via: Address | None = None
        self.reflector = _bound(host)
        self.sender = _bound(host)
        self.up_delays_s: dict[int, float] = {}
        self.down_delays_s: dict[int, float] = {}
        self.sent = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handles: list[asyncio.TimerHandle] = []
        self.closed = False

    @property
    def reflector_address(self) -> Address:
        return self.reflector.getsockname()[:2]

    def start(self) -> LinkProbe:
        assert self.via is not None, "set via (the proxy's address) first"
        loop = self._loop = asyncio.get_running_loop()
        loop.add_reader(self.reflector.fileno(), self._reflect)
        loop.add_reader(self.sender.fileno(), self._returned)
        begin = loop.time() + 0.01
        self._handles = [
            loop.call_at(begin + i / self.rate_pps, self._send, i) for i in range(self.count)
        ]
        return self

    @property
    def duration_s(self) -> float:
        return self.count / self.rate_pps

    def _send(self, seq: int) -> None:
        assert self._loop is not None and self.via is not None
        data = _OUT.pack(seq, self._loop.time()).ljust(self.size, b"\0")
        with contextlib.suppress(OSError):
            self.sender.sendto(data, self.via)
            self.sent += 1

    def _reflect(self) -> None:
        assert self._loop is not None
        while True:
            try:
                data, src = self.reflector.recvfrom(2048)
            except OSError:
                return
            now = self._loop.time()
            seq, sent_at = _OUT.unpack_from(data)
            self.up_delays_s[seq] = now - sent_at
            with contextlib.suppress(OSError):
                self.reflector.sendto(_BACK.pack(seq, sent_at, now).ljust(self.size, b"\0"), src)

    def _returned(self) -> None:
        assert self._loop is not None
        while True:
            try:
                data = self.sender.recv(2048)
            except OSError:
                return
            seq, _sent_at, reflected_at = _BACK.unpack_from(data)
            self.down_delays_s[seq] = self._loop.time() - reflected_at

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for handle in self._handles:
            handle.cancel()
        for sock in (self.reflector, self.sender):
            with contextlib.suppress(ValueError, OSError):
                if self._loop is not None and not self._loop.is_closed():
                    self._loop.remove_reader(sock.fileno())
            sock.close()

    def figures(self) -> dict[str, dict[str, Any]]:
        """Per direction: datagrams sent and received, loss, one-way delay (mean, spread)."""
        up = direction_figures(self.sent, list(self.up_delays_s.values()))
        down = direction_figures(len(self.up_delays_s), list(self.down_delays_s.values()))
        return {"up": up, "down": down}


def _bound(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sock.bind((host, 0))
    return sock


def direction_figures(sent: int, delays_s: list[float]) -> dict[str, Any]:
    received = len(delays_s)
    lost = max(0, sent - received)
    ms = sorted(1000 * d for d in delays_s)
    return {
        "sent": sent,
        "received": received,
        "loss_pct": 100.0 * lost / sent if sent else math.nan,
        "loss_ci95_pct": [100 * x for x in wilson_interval(lost, sent)],
        "mean_delay_ms": statistics.fmean(ms) if ms else math.nan,
        "sd_delay_ms": statistics.pstdev(ms) if len(ms) > 1 else math.nan,
        "p50_delay_ms": ms[len(ms) // 2] if ms else math.nan,
        "p95_delay_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))] if ms else math.nan,
    }


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % interval of a proportion k/n (Wilson score): sensible for k = 0 and small n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def samples_to_resolve(loss_pct: float, tolerance: float) -> int:
    """Datagrams needed for a 95 % interval of ±``tolerance`` (relative) around ``loss_pct``."""
    p = loss_pct / 100
    if p <= 0:
        return 0
    return math.ceil((1.96 / tolerance) ** 2 * (1 - p) / p)


def check(measured: dict[str, Any], spec: LinkSpec, tolerance: float = 0.10) -> dict[str, Any]:
    """A direction's probe figures against its settings (see the module's docstring)."""
    mean = measured["mean_delay_ms"]
    delay_ok = math.isfinite(mean) and abs(mean - spec.delay_ms) <= tolerance * spec.delay_ms
    loss = measured["loss_pct"]
    lo, hi = measured["loss_ci95_pct"]
    within = math.isfinite(loss) and abs(loss - spec.loss_pct) <= tolerance * spec.loss_pct
    consistent = lo <= spec.loss_pct <= hi
    if within:
        loss_verdict = "within"
    elif consistent:
        loss_verdict = "consistent"
    else:
        loss_verdict = "off"
    return {
        "delay_error_pct": 100 * (mean - spec.delay_ms) / spec.delay_ms if spec.delay_ms else 0.0,
        "delay_ok": bool(delay_ok),
        "loss_verdict": loss_verdict,
        "loss_ok": loss_verdict != "off",
        "samples_to_resolve_loss": samples_to_resolve(spec.loss_pct, tolerance),
    }
