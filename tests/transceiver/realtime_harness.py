"""One real browser call to a voice agent, as OpenAI documents its Realtime WebRTC flow: headless
Chromium -> relay -> transceiver (``--backend realtime``) -> the example agent.

``browser_harness`` with another call (its stack, Chromium, CDP, bounds, watchdog and one JSON
line are reused): as an app's server would, the harness gets a client secret from
``POST /v1/realtime/client_secrets`` with the operator's API key (``--api-key-file``), opens
``/realtime?key=SECRET`` (transceiver/static/realtime.js) in a Chromium whose fake microphone
plays ``--microphone`` (a WAV: the test's spoken sentences), clicks Talk, and once the call is
up taps the received audio with a Web Audio worklet: the RMS of every 128-sample render quantum,
on the audio clock (``tap``), which the report maps to the page's ``performance.now()`` clock
(the one its events' arrival times are on). The page's inbound-rtp energy (``levels``) is no
instrument for edges: WebRTC updates the level it integrates only every 11th 10 ms frame, and
decays it by quarters. Before the page loads, the harness also wraps ``RTCPeerConnection`` to
put a pass-through ``RTCRtpScriptTransform`` on the audio receiver (``packets``: each packet's
arrival, RTP timestamp and size, before the jitter buffer) and to sample its inbound-rtp
jitter-buffer counters (``neteq``). The instruments belong to the harness, not the page: the
page's own code stays exactly what a user runs.

The call lasts until the transceiver has cut the answer the microphone's second sentence
interrupts (``output_audio_buffer.cleared``) and ``--settle`` seconds more have been heard, or
until the microphone's file has played once (``--microphone-seconds``) plus a margin. Either
way the report holds every event the page got (with ``t``, its arrival time), the tap, the
packets, the levels and jitter-buffer samples, and the page's state; the test judges them
(``realtime_figures``).

    python -m tests.transceiver.realtime_harness --microphone mic.wav --microphone-seconds 16 \\
        --api-key-file key --stack 'python -m tests.transceiver.realtime_stack --http {http} ...'
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from tests.transceiver.browser_harness import (
    HarnessConfig,
    HarnessError,
    Run,
    arguments,
    config_from,
    log,
    poll,
    report,
)

# The tap: a worklet summing each render quantum's squares; it posts [frame, rms, ...] every
# few quanta with the context frame of the last one, which the page stamps with
# performance.now() on arrival (the earliest stamp bounds the clocks' offset: realtime_figures).
TAP_JS = r"""
(async () => {
  const stream = document.getElementById("remote-audio").srcObject;
  if (!stream) return "no remote stream yet";
  const code = `
    class RtcedgeTap extends AudioWorkletProcessor {
      constructor() { super(); this.batch = []; }
      process(inputs) {
        const channel = inputs[0] && inputs[0][0];
        let sum = 0;
        if (channel) for (let i = 0; i < channel.length; i++) sum += channel[i] * channel[i];
        const n = channel ? channel.length : 128;
        this.batch.push(currentFrame + n, channel ? Math.sqrt(sum / n) : 0);
        if (this.batch.length >= 8) { this.port.postMessage(this.batch); this.batch = []; }
        return true;
      }
    }
    registerProcessor("rtcedge-tap", RtcedgeTap);`;
  const ctx = new AudioContext();
  await ctx.audioWorklet.addModule(
    URL.createObjectURL(new Blob([code], { type: "application/javascript" })));
  const node = new AudioWorkletNode(ctx, "rtcedge-tap");
  const mute = ctx.createGain();
  mute.gain.value = 0;  // the page's <audio> plays the call; the tap only listens
  ctx.createMediaStreamSource(stream).connect(node);
  node.connect(mute).connect(ctx.destination);
  const tap = { rate: ctx.sampleRate, quanta: [], posts: [], ctx };
  node.port.onmessage = (m) => {
    const last = m.data[m.data.length - 2];
    tap.posts.push([last, performance.now()]);
    for (let i = 0; i < m.data.length; i += 2) tap.quanta.push([m.data[i], m.data[i + 1]]);
  };
  await ctx.resume();
  window.rtcedgeTap = tap;
  return ctx.state;
})()
"""
TAP_READ_JS = """(() => {
  const tap = window.rtcedgeTap;
  return tap ? { rate: tap.rate, quanta: tap.quanta, posts: tap.posts,
                 baseLatency: tap.ctx.baseLatency, outputLatency: tap.ctx.outputLatency,
                 state: tap.ctx.state } : null;
})()"""
# Before the page's script runs: remember its peer connections (the page keeps its own to
# itself), so that the harness can read the receiver's jitter-buffer counters.
# It also puts a pass-through transform on each audio receiver (RTCRtpScriptTransform, in a
# worker): every packet's arrival time, RTP timestamp and size, before the jitter buffer.
PEERS_JS = r"""(() => {
  const Native = window.RTCPeerConnection;
  const code = `
    postMessage({ origin: performance.timeOrigin });
    onrtctransform = (event) => {
      const rows = [];
      const keep = new TransformStream({
        transform(frame, out) {
          rows.push([performance.now(), frame.timestamp, frame.data.byteLength]);
          if (rows.length >= 10) postMessage(rows.splice(0));
          out.enqueue(frame);
        },
      });
      event.transformer.readable.pipeThrough(keep).pipeTo(event.transformer.writable);
    };`;
  const url = URL.createObjectURL(new Blob([code], { type: "application/javascript" }));
  window.rtcedgePeers = [];
  window.rtcedgePackets = { origin: null, rows: [] };
  const watch = (receiver) => {
    const worker = new Worker(url);
    worker.onmessage = (m) => {
      const packets = window.rtcedgePackets;
      if (m.data.origin !== undefined) packets.origin = m.data.origin;
      else if (packets.rows.length < 3000) packets.rows.push(...m.data);
    };
    receiver.transform = new RTCRtpScriptTransform(worker, {});
  };
  window.RTCPeerConnection = class extends Native {
    constructor(...args) {
      super(...args);
      window.rtcedgePeers.push(this);
    }
    addTrack(track, ...streams) {  // the receiver of the same transceiver: before any offer
      const sender = super.addTrack(track, ...streams);
      const both = this.getTransceivers().find((t) => t.sender === sender);
      if (track.kind === "audio" && both) watch(both.receiver);
      return sender;
    }
  };
})();"""
# Every 20 ms, what NetEq did to the received audio: stretched (inserted samples), squeezed
# (removed), concealed, and how long packets waited.
NETEQ_JS = r"""
(() => {
  const pc = window.rtcedgePeers[window.rtcedgePeers.length - 1];
  const samples = [];
  const fields = ["totalSamplesReceived", "concealedSamples", "insertedSamplesForDeceleration",
    "removedSamplesForAcceleration", "jitterBufferDelay", "jitterBufferEmittedCount",
    "jitterBufferTargetDelay", "jitterBufferMinimumDelay", "packetsReceived"];
  const timer = setInterval(async () => {
    (await pc.getStats()).forEach((st) => {
      if (st.type !== "inbound-rtp" || st.kind !== "audio" || samples.length >= 6000) return;
      const row = { t: performance.now() };
      for (const f of fields) row[f] = st[f];
      samples.push(row);
    });
  }, 20);
  window.rtcedgeNetEq = { samples, stop: () => clearInterval(timer) };
  return true;
})()
"""
PAGE = "window.rtcedgeRealtime"
# The transceiver's word that it cut the answer (OpenAI's WebRTC event of the same name).
CLEARED = (
    "(window.rtcedgeRealtime.events().find((e) => e.type === 'output_audio_buffer.cleared')"
    " || {}).t || null"
)


@dataclasses.dataclass(frozen=True)
class RealtimeOptions:
    """What this harness adds to ``HarnessConfig``."""

    api_key_file: Path | None  # the operator's API key: the harness mints the client secret
    microphone_s: float  # how long the fake microphone's file plays (once)
    settle_s: float  # heard after the answer was cut, before the call ends


class RealtimeRun(Run):
    """``browser_harness.Run`` with the Realtime page's call."""

    def __init__(self, config: HarnessConfig, options: RealtimeOptions) -> None:
        super().__init__(config)
        self.options = options
        self.result["stats"] = None

    async def client_secret(self) -> str:
        """What an app's server does: a client secret for its browser, with its API key."""
        if self.options.api_key_file is None:
            return ""
        assert self.http is not None
        key = self.options.api_key_file.read_text().strip()
        body = {"expires_after": {"anchor": "created_at", "seconds": 600}}
        async with self.http.post(
            f"{self.config.origin}/v1/realtime/client_secrets",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        ) as response:
            text = await response.text()
            if response.status != 200:
                raise HarnessError(f"client_secrets answered {response.status}: {text[:200]}")
            reply = await response.json()
        self.result["client_secret"] = {k: v for k, v in reply.items() if k != "value"}
        return reply["value"]

    async def call(self) -> None:
        driver = self.driver
        assert driver is not None
        secret = await self.client_secret()
        self.mark("client_secret")
        await driver.add_init_script(PEERS_JS)
        url = self.config.page_url + ("&" if "?" in self.config.page_url else "?") + "key="
        log(f"opening {url}<client secret>")
        await driver.navigate(url + secret)

        async def page_ready() -> bool:
            return await driver.evaluate(
                f"document.readyState === 'complete' && typeof {PAGE} === 'object'"
            )

        await poll(f"the page and {PAGE}", page_ready, 10)
        self.mark("page_loaded")
        log("clicking Talk")
        self.result["talk_at"] = await driver.evaluate(
            "document.getElementById('talk').click(), performance.now()"
        )
        await self.connected()
        self.result["tap_state"] = await driver.evaluate(TAP_JS)
        await driver.evaluate(NETEQ_JS)
        log(f"audio tap: {self.result['tap_state']}; waiting for the conversation")
        await self.conversation()
        await self.collect()
        await self.hang_up()

    async def connected(self) -> None:
        driver = self.driver
        assert driver is not None
        clicked_at = time.monotonic()

        async def settled() -> dict[str, Any] | None:
            state = await driver.evaluate(f"{PAGE}.state()")
            self.result["state"] = state
            if state["connectionState"] == "connected" and state["dataChannel"] == "open":
                return state
            # "closed" also before the page has its microphone (no call yet): not a failure
            if state["connectionState"] == "failed" or state.get("error"):
                raise HarnessError(f"the call did not connect: {state}")
            return None

        try:
            await poll("connected, oai-events open", settled, self.config.connect_timeout_s, 0.05)
        finally:
            self.result["connect_ms"] = round((time.monotonic() - clicked_at) * 1000)
        self.result["connected"] = True
        self.result["connected_at"] = await driver.evaluate("performance.now()")
        self.mark("connected")
        log(f"connected in {self.result['connect_ms']} ms")

    async def conversation(self) -> None:
        """Until the transceiver cut the answer (``output_audio_buffer.cleared``) and ``settle_s``
        more were heard, or the microphone's file has played; a conversation that went wrong is
        the test's to judge."""
        driver = self.driver
        assert driver is not None
        deadline = time.monotonic() + self.options.microphone_s + 3

        async def cleared() -> float | None:
            return await driver.evaluate(CLEARED)

        with contextlib.suppress(HarnessError):
            await poll("the answer cut", cleared, deadline - time.monotonic(), 0.2)
            await asyncio.sleep(self.options.settle_s)
        self.mark("conversation")

    async def collect(self) -> None:
        driver = self.driver
        assert driver is not None
        self.result["events"] = await driver.evaluate(f"{PAGE}.events()")
        self.result["levels"] = await driver.evaluate(f"{PAGE}.levels()")
        self.result["tap"] = await driver.evaluate(TAP_READ_JS, 20)
        self.result["neteq"] = await driver.evaluate(
            "window.rtcedgeNetEq.stop(), window.rtcedgeNetEq.samples", 20
        )
        self.result["state"] = await driver.evaluate(f"{PAGE}.state()")
        self.result["time_origin_ms"] = await driver.evaluate("performance.timeOrigin")
        self.result["packets"] = await driver.evaluate("window.rtcedgePackets", 20)
        self.mark("collected")

    async def hang_up(self) -> None:
        driver = self.driver
        assert driver is not None
        log("clicking Hang up")
        await driver.evaluate("document.getElementById('hangup').click(), true")

        async def closed() -> dict[str, Any] | None:
            state = await driver.evaluate(f"{PAGE}.state()")
            return state if state["connectionState"] == "closed" else None

        self.result["state_after_hangup"] = await poll("the call closed", closed, 5)
        self.mark("hung_up")

    async def diagnose(self) -> None:
        if self.driver is None:
            return
        with contextlib.suppress(Exception):
            self.result["state"] = await self.driver.evaluate(f"{PAGE}.state()", 3)
            self.result["events"] = await self.driver.evaluate(f"{PAGE}.events()", 3)


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--microphone", type=Path, required=True, help="the fake mic's WAV")
    parser.add_argument("--microphone-seconds", type=float, required=True, help="its length")
    parser.add_argument("--api-key-file", type=Path, help="the operator's API key (a file)")
    parser.add_argument("--settle", type=float, default=1.5, help="heard after the cut, s")
    parser.add_argument("--page-path", default="/realtime", help="the page (default %(default)s)")
    args = parser.parse_args(argv)
    config = dataclasses.replace(
        config_from(args),
        page_path=args.page_path,
        chromium_flags=(f"--use-file-for-fake-audio-capture={args.microphone}",),
    )
    options = RealtimeOptions(args.api_key_file, args.microphone_seconds, args.settle)
    return report(RealtimeRun(config, options))


if __name__ == "__main__":
    sys.exit(main())
