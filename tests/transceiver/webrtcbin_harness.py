"""One GStreamer webrtcbin call through the whole stack: webrtcbin -> relay -> transceiver -> echo.

``browser_harness`` with another caller (its stack, bounds, watchdog and one JSON line are
reused): instead of Chromium, ``webrtcbin_peer`` places the call, a script run by Debian's
``/usr/bin/python3`` (the one with python3-gi), as a child of its own process group and of this
harness (the kernel ends it if the harness dies). Meant to run INSIDE a fresh loopback-only
network namespace (``test_webrtcbin.py`` makes it): the stack and the caller then have only
``lo``. The peer's report (JSON) becomes the harness report's ``peer``; the decoded echo is in
``--pcm-out``, for the test to judge.

    python -m tests.transceiver.webrtcbin_harness --http-port 8080 --relay-port 3478 \\
        --stack 'rtcedge up --http {http} --relay {relay} --token-secret-file SECRET' \\
        --token-file TOKEN --pcm-out /tmp/echo.pcm
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path

from tests.transceiver.browser_harness import (
    Child,
    HarnessConfig,
    HarnessError,
    Run,
    arguments,
    config_from,
    log,
    report,
)

PEER = Path(__file__).with_name("webrtcbin_peer.py")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-gi; the tests' Python has no gi
PEER_EXIT_MARGIN_S = 20  # the peer bounds itself to its --timeout; its watchdog to 15 s more


@dataclasses.dataclass(frozen=True)
class PeerOptions:
    """What the webrtcbin caller is given."""

    python: str
    token_file: Path | None
    pcm_out: Path
    tone_hz: float
    call_timeout_s: float
    bundle_policy: str = "none"  # webrtcbin's own default: its stock offer has no BUNDLE group


class WebrtcbinRun(Run):
    """``browser_harness.Run`` whose caller is ``webrtcbin_peer`` instead of Chromium."""

    def __init__(self, config: HarnessConfig, options: PeerOptions) -> None:
        super().__init__(config)
        self.options = options
        self.peer: Child | None = None
        self.result["caller"] = "webrtcbin"

    async def start_browser(self) -> None:
        """No browser: ``call`` starts the caller."""

    async def call(self) -> None:
        options = self.options
        argv = [
            options.python,
            str(PEER),
            "--whip",
            f"{self.config.origin}/whip",
            "--local-address",
            self.config.host,
            "--pcm-out",
            str(options.pcm_out),
            "--tone-hz",
            str(options.tone_hz),
            "--audio-seconds",
            str(self.config.audio_s),
            "--timeout",
            str(options.call_timeout_s),
            "--bundle-policy",
            options.bundle_policy,
        ]
        if options.token_file is not None:
            argv += ["--token-file", str(options.token_file)]
        log(f"starting webrtcbin_peer under {options.python}")
        self.peer = await Child.start("webrtcbin", argv, keep_lines=400)
        if not await self.peer.wait_exit(options.call_timeout_s + PEER_EXIT_MARGIN_S):
            raise HarnessError("webrtcbin_peer did not exit within its own bounds")
        await self.peer.stop(term_timeout_s=1)  # its output read to the end
        reports = [line for line in self.peer.lines if line.startswith("{")]
        if not reports:
            code = self.peer.proc.returncode
            raise HarnessError(f"webrtcbin_peer printed no report (exit {code})")
        with contextlib.suppress(ValueError):
            self.result["peer"] = json.loads(reports[-1])
        peer = self.result.get("peer")
        if not isinstance(peer, dict):
            raise HarnessError(f"webrtcbin_peer's report is not JSON: {reports[-1][:200]}")
        self.result["connected"] = "connected" in peer.get("marks_ms", {})
        if peer.get("error"):
            raise HarnessError(f"webrtcbin_peer: {peer['error']}")
        self.mark("call_done")

    async def cleanup(self) -> None:
        if self.peer is not None:
            self.result["peer_exit"] = await self.peer.stop(term_timeout_s=5)
            self.result["peer_output"] = [
                line for line in self.peer.lines if not line.startswith("{")
            ][-60:]
            self.result["peer_leftovers"] = self.peer.leftovers
        await super().cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--peer-python", default=SYSTEM_PYTHON, help="the Python with gi")
    parser.add_argument("--token-file", type=Path, default=None, help="the WHIP bearer token")
    parser.add_argument("--pcm-out", type=Path, required=True, help="the decoded echo (S16LE)")
    parser.add_argument("--tone-hz", type=float, default=660.0, help="the tone webrtcbin sends")
    parser.add_argument(  # not --bundle-policy: that is the browsers', which have no none
        "--peer-bundle-policy",
        default="none",
        help="webrtcbin's bundle-policy (none, its default: its stock offer, no BUNDLE group)",
    )
    args = parser.parse_args(argv)
    config = config_from(args)
    # The caller's own bound leaves the harness's stack start and cleanup room inside its own.
    call_timeout_s = max(10.0, config.total_timeout_s - config.ready_timeout_s - 10)
    options = PeerOptions(
        args.peer_python,
        args.token_file,
        args.pcm_out,
        args.tone_hz,
        call_timeout_s,
        args.peer_bundle_policy,
    )
    return report(WebrtcbinRun(config, options))


if __name__ == "__main__":
    sys.exit(main())
