"""A GStreamer webrtcbin caller: one WHIP call with a tone and a data channel, reported as JSON.

Runs under Debian's /usr/bin/python3, whose python3-gi binds GStreamer (the tests' Python has
no gi): stdlib and gi only, no rtcedge import. ``webrtcbin_harness`` starts it inside the
test's network namespace. webrtcbin makes its stock offer (``a=setup:actpass``, its own RSA
certificate, libnice for ICE, OpenSSL for DTLS) with ``--bundle-policy`` (``none``, its own
default: no BUNDLE group, ICE credentials of its own in every m-line; or ``max-bundle``):
``audiotestsrc`` plays a sine at ``--tone-hz`` through Opus, and a data channel ``events`` is
opened. The offer is POSTed to ``--whip`` with the bearer token read from ``--token-file``
(never the command line); once connected, one JSON message goes over the channel (unless the
answer rejected its m-line, as it does an offer without BUNDLE), ``--audio-seconds`` of the
echo are decoded to ``--pcm-out`` (S16LE, mono, 48 kHz), webrtcbin's stats are read, and the
WHIP resource is DELETEd. It prints ONE JSON line (what happened, step by step) and exits;
the caller judges.

Bounded: every step has its own timeout, ``--timeout`` bounds the whole run, a watchdog thread
ends the process if even that fails, and the kernel ends it when its parent dies.

    /usr/bin/python3 tests/transceiver/webrtcbin_peer.py --whip http://127.0.0.1:8080/whip \\
        --token-file token --pcm-out /tmp/echo.pcm
    /usr/bin/python3 tests/transceiver/webrtcbin_peer.py --check  # what is missing, if anything
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

# What is missing, said by --check (and by any run) instead of a traceback: python3-gi, and the
# GObject bindings of GStreamer, its WebRTC library (gir1.2-gst-plugins-bad-1.0) and libnice's
# (gir1.2-nice-0.1).
try:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstSdp", "1.0")
    gi.require_version("GstWebRTC", "1.0")
    gi.require_version("Nice", "0.1")
    from gi.repository import GLib, Gst, GstSdp, GstWebRTC, Nice
except (ImportError, ValueError) as exc:
    GI_MISSING: str | None = f"{type(exc).__name__}: {exc}"
else:
    GI_MISSING = None

RATE_HZ = 48000
BUNDLE_POLICIES = ("none", "balanced", "max-compat", "max-bundle")  # webrtcbin's bundle-policy
CHANNEL_LABEL = "events"  # the transceiver's events channel (transceiver/static/app.js)
PING = {"type": "ping", "from": "webrtcbin"}
GATHER_TIMEOUT_S = 5.0  # offer -> ICE gathering complete (then the offer goes as it is)
HTTP_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 20.0  # answer -> connection-state connected
CHANNEL_TIMEOUT_S = 10.0  # connected -> the channel open and an echo back
GONE_S = 5.0  # DELETE -> the resource gone (the session's teardown is bounded below that)
GONE_POLL_S = 0.2
PR_SET_PDEATHSIG = 1  # linux/prctl.h
ELEMENTS = {  # what a call uses: element -> the Debian package that has it
    "webrtcbin": "gstreamer1.0-plugins-bad",
    "dtlssrtpenc": "gstreamer1.0-plugins-bad",
    "srtpenc": "gstreamer1.0-plugins-bad",
    "sctpenc": "gstreamer1.0-plugins-bad",
    "nicesrc": "gstreamer1.0-nice",
    "rtpopuspay": "gstreamer1.0-plugins-good",
    "rtpopusdepay": "gstreamer1.0-plugins-good",
    "opusenc": "gstreamer1.0-plugins-base",
    "opusdec": "gstreamer1.0-plugins-base",
    "audiotestsrc": "gstreamer1.0-plugins-base",
    "appsink": "gstreamer1.0-plugins-base",
}


def log(message: str) -> None:
    print(f"[webrtcbin_peer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """SIGKILL when the process that started us dies (the harness), however it dies."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent or parent == 1:
        os._exit(3)


def pipeline_description(tone_hz: float, bundle_policy: str) -> str:
    send = (
        f"audiotestsrc is-live=true wave=sine freq={tone_hz} volume=0.3 "
        f"! audioconvert ! audioresample ! audio/x-raw,rate={RATE_HZ},channels=1 "
        "! opusenc ! rtpopuspay pt=111 "
        f"! application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate={RATE_HZ} "
        "! webrtc."
    )
    return f"webrtcbin name=webrtc bundle-policy={bundle_policy} {send}"


def structure_values(structure: Gst.Structure) -> dict[str, Any]:
    """A stats structure's fields as JSON-able values (GStreamer enums by their nick)."""
    out: dict[str, Any] = {}
    for i in range(structure.n_fields()):
        name = structure.nth_field_name(i)
        value = structure.get_value(name)
        if name == "type" and isinstance(value, int):
            out[name] = GstWebRTC.WebRTCStatsType(value).value_nick
        elif isinstance(value, bool | int | float | str):
            out[name] = value
        elif hasattr(value, "value_nick"):
            out[name] = value.value_nick
    return out


def all_stats(stats: Gst.Structure) -> list[dict[str, Any]]:
    """webrtcbin's get-stats reply: one dict per stats object, with its ``id``."""
    out = []
    for i in range(stats.n_fields()):
        name = stats.nth_field_name(i)
        value = stats.get_value(name)
        if isinstance(value, Gst.Structure):
            out.append({"id": name, **structure_values(value)})
    return out


def http(method: str, url: str, token: str, body: bytes | None = None) -> tuple[int, dict, str]:
    """One WHIP request: (status, headers, body); a refusal is a status, not an exception."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        headers["Content-Type"] = "application/sdp"
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode(errors="replace")


def rejected_m_lines(sdp: str) -> list[str]:
    """The kinds of the m-lines an SDP rejects (port 0, RFC 3264 6), in its order."""
    fields = (line[2:].split() for line in sdp.splitlines() if line.startswith("m="))
    return [f[0] for f in fields if len(f) > 1 and f[1] == "0"]


def once(function: Any, *args: Any) -> bool:
    """For ``GLib.idle_add``: call ``function(*args)`` on the main loop, once."""
    function(*args)
    return False


class Call:
    """The call, step by step on GLib's main loop; each step fills ``result``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.token = args.token_file.read_text().strip() if args.token_file else ""
        self.loop = GLib.MainLoop()
        self.pipeline = Gst.parse_launch(pipeline_description(args.tone_hz, args.bundle_policy))
        self.webrtc = self.pipeline.get_by_name("webrtc")
        self.use_local_address(args.local_address)
        self.channel: Any = None
        self.location: str | None = None
        self.deleted_at: float | None = None  # when the DELETE was answered
        # Once the DELETE is sent, webrtcbin's errors are expected: the transceiver may end SCTP
        # and DTLS before its answer reaches us (seen on a busy machine).
        self.delete_sent = False
        self.pcm = open(args.pcm_out, "wb")  # noqa: SIM115 (closed in finish)
        self.pcm_bytes = 0
        self.pcm_limit = int(args.audio_seconds * 4 * RATE_HZ * 2)  # room for a slow start
        self.started = time.monotonic()
        self.timers: dict[str, int] = {}
        self.result: dict[str, Any] = {
            "ok": False,
            "error": None,
            "gstreamer": Gst.version_string(),
            "tone_hz": args.tone_hz,
            "pcm_out": args.pcm_out,
            "rate_hz": RATE_HZ,
            "marks_ms": {},
            "states": [],
            "messages": [],
        }
        self.webrtc.connect("on-negotiation-needed", self.on_negotiation_needed)
        self.webrtc.connect("pad-added", self.on_pad_added)
        self.webrtc.connect("on-ice-candidate", self.on_ice_candidate)
        for prop in ("connection-state", "ice-connection-state", "ice-gathering-state"):
            self.webrtc.connect(f"notify::{prop}", self.on_state)
        bus = self.pipeline.get_bus()
        bus.add_signal_watch()
        bus.connect("message::error", self.on_bus_error)

    def use_local_address(self, host: str) -> None:
        """Gather on ``host`` only. libnice leaves loopback interfaces out of its own list
        ("Ignoring loopback interface"), so in the test's loopback-only namespace it would
        have no candidate at all; an address given to its agent replaces that list."""
        address = Nice.Address.new()
        if not address.set_from_string(host):
            raise SystemExit(f"--local-address {host!r} is not an IP address")
        # webrtcbin 1.22 hands its "ice-agent" out without a reference for the caller, so the
        # Python wrapper's release would free the agent under webrtcbin (a segfault): one more
        # reference, never released, and the wrapper kept for the whole run.
        self.ice = self.webrtc.get_property("ice-agent")
        capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        capsule_pointer.restype = ctypes.c_void_p
        capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        gobject = ctypes.CDLL("libgobject-2.0.so.0")
        gobject.g_object_ref.argtypes = [ctypes.c_void_p]
        gobject.g_object_ref.restype = ctypes.c_void_p
        gobject.g_object_ref(capsule_pointer(self.ice.__gpointer__, None))
        self.ice.get_property("agent").add_local_address(address)

    # -- helpers ------------------------------------------------------------------------------
    def mark(self, name: str) -> None:
        self.result["marks_ms"][name] = round((time.monotonic() - self.started) * 1000)

    def fail(self, reason: str) -> None:
        if self.result["error"] is None:
            log(f"failed: {reason}")
            self.result["error"] = reason
        self.loop.quit()

    def deadline(self, name: str, seconds: float, what: str) -> None:
        """Fail with ``what`` unless ``done(name)`` comes first."""

        def expired() -> bool:
            self.timers.pop(name, None)
            self.fail(f"timed out after {seconds} s waiting for {what}")
            return False

        self.timers[name] = GLib.timeout_add(int(seconds * 1000), expired)

    def done(self, name: str) -> None:
        timer = self.timers.pop(name, None)
        if timer is not None:
            GLib.source_remove(timer)

    def in_thread(self, work: Any, then: Any) -> None:
        """``work()`` off the main loop (blocking HTTP), ``then(result)`` back on it."""

        def run() -> None:
            try:
                value = work()
            except Exception as exc:  # reported on the main loop, not lost in a thread
                GLib.idle_add(once, self.fail, f"{type(exc).__name__}: {exc}")
                return
            GLib.idle_add(once, then, value)

        threading.Thread(target=run, daemon=True).start()

    # -- the call -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        GLib.timeout_add(int(self.args.timeout * 1000), self.overall_timeout)
        if self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE:
            self.fail("the pipeline did not start")
        else:
            self.loop.run()
        self.finish()
        return self.result

    def overall_timeout(self) -> bool:
        self.fail(f"the whole call took more than {self.args.timeout} s")
        return False

    def on_bus_error(self, _bus: Gst.Bus, message: Gst.Message) -> None:
        error, debug = message.parse_error()
        reason = f"GStreamer error from {message.src.get_name()}: {error.message} ({debug})"
        if self.delete_sent:  # the transceiver ends the call: SCTP and DTLS end
            self.result.setdefault("errors_after_delete", []).append(reason)
            return
        self.fail(reason)

    def on_state(self, element: Gst.Element, spec: Any) -> None:
        value = element.get_property(spec.name)
        nick = value.value_nick
        self.result["states"].append([self.result_ms(), spec.name, nick])
        log(f"{spec.name}: {nick}")
        if spec.name == "ice-gathering-state" and nick == "complete":
            GLib.idle_add(self.post_offer)
        elif spec.name == "connection-state" and nick == "connected":
            GLib.idle_add(self.connected)
        elif spec.name == "ice-connection-state" and nick in ("connected", "completed"):
            GLib.idle_add(self.check_audio_transport)
        elif spec.name == "connection-state" and nick == "failed" and not self.delete_sent:
            GLib.idle_add(once, self.fail, "connection-state failed")

    def result_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def on_ice_candidate(self, _element: Gst.Element, _mline: int, candidate: str) -> None:
        log(f"local candidate: {candidate}")
        self.result.setdefault("local_candidates", []).append(candidate)

    def on_negotiation_needed(self, _element: Gst.Element) -> None:
        if "offer" in self.result["marks_ms"]:
            return
        self.channel = self.webrtc.emit("create-data-channel", CHANNEL_LABEL, None)
        if self.channel is None:
            self.fail("create-data-channel returned nothing")
            return
        self.channel.connect("on-open", self.on_channel_open)
        self.channel.connect("on-message-string", self.on_channel_message)
        self.webrtc.emit("create-offer", None, Gst.Promise.new_with_change_func(self.on_offer))

    def on_offer(self, promise: Gst.Promise) -> None:
        reply = promise.get_reply()
        offer = reply.get_value("offer") if reply is not None else None
        if offer is None:
            GLib.idle_add(once, self.fail, "create-offer gave no offer")
            return
        self.webrtc.emit("set-local-description", offer, None)
        self.mark("offer")
        # The offer goes once ICE gathering completes (its candidates in it; the transceiver
        # ignores them, but a stack that trickles would send them later), or after the bound.
        GLib.timeout_add(int(GATHER_TIMEOUT_S * 1000), self.post_offer)

    def post_offer(self) -> bool:
        if "posted" in self.result["marks_ms"]:
            return False
        self.mark("posted")
        sdp = self.webrtc.get_property("local-description").sdp.as_text()
        self.result["offer"] = sdp
        log(f"POST {self.args.whip}")
        self.in_thread(
            lambda: http("POST", self.args.whip, self.token, sdp.encode()), self.on_answer
        )
        return False

    def on_answer(self, reply: tuple[int, dict, str]) -> None:
        status, headers, body = reply
        self.result["post_status"] = status
        if status != 201:
            self.fail(f"the WHIP POST answered {status}: {body.strip()[:300]}")
            return
        self.mark("answered")
        self.result["answer"] = body
        location = headers.get("Location") or headers.get("location")
        if not location:
            self.fail("the WHIP answer has no Location")
            return
        self.location = urllib.parse.urljoin(self.args.whip, location)
        ok, message = GstSdp.SDPMessage.new_from_text(body)
        if ok != GstSdp.SDPResult.OK:
            self.fail("the answer does not parse as SDP")
            return
        self.result["rejected"] = rejected_m_lines(body)
        answer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, message)
        self.webrtc.emit("set-remote-description", answer, None)
        self.deadline("connect", CONNECT_TIMEOUT_S, "connection-state connected")
        if self.result["rejected"]:
            self.watch_audio_transport()

    def watch_audio_transport(self) -> None:
        """When the answer rejects an m-line (port 0), webrtcbin 1.22's connection-state stays
        "connecting": it collates the rejected data channel's transport too, which stays
        "new", and that mix is its "Undefined situation" (``_collate_peer_connection_states``
        keeps the old state). The call is then connected once ICE is (webrtcbin's
        ice-connection-state, which leaves such a transport out) and the audio m-line's DTLS
        transport is. (Not its ICE transport's own state: reading the DTLS transport's
        ``transport`` property from Python drops a reference webrtcbin still needs, and ICE
        then never starts.)"""
        self.audio_transport().connect(
            "notify::state", lambda *_: GLib.idle_add(self.check_audio_transport)
        )
        GLib.idle_add(self.check_audio_transport)

    def check_audio_transport(self) -> bool:
        if "rejected" not in self.result or not self.result["rejected"]:
            return False
        dtls = self.audio_transport().get_property("state").value_nick
        ice = self.webrtc.get_property("ice-connection-state").value_nick
        if dtls == "connected" and ice in ("connected", "completed"):
            self.result["connected_by"] = "ice-connection-state and the audio's DTLS transport"
            self.connected()
        return False

    def audio_transport(self) -> Any:
        transceiver = self.webrtc.emit("get-transceiver", 0)
        return transceiver.get_property("sender").get_property("transport")

    def connected(self) -> bool:
        if "connected" in self.result["marks_ms"]:
            return False
        self.done("connect")
        self.mark("connected")
        self.result.setdefault("connected_by", "connection-state")
        self.result["dtls"] = self.dtls_transport()
        if "application" not in self.result["rejected"]:
            self.deadline("channel", CHANNEL_TIMEOUT_S, "the data channel's echo")
        GLib.timeout_add(int(self.args.audio_seconds * 1000), self.audio_heard)
        return False

    def dtls_transport(self) -> dict[str, Any]:
        """Who is the DTLS server, and both certificates (PEM), of the audio's transport (the
        one BUNDLE transport, or the only one the answer did not reject)."""
        transport = self.audio_transport()
        return {
            "client": transport.get_property("client"),
            "state": transport.get_property("state").value_nick,
            "certificate": transport.get_property("certificate"),
            "remote_certificate": transport.get_property("remote-certificate"),
        }

    def on_channel_open(self, channel: Any) -> None:
        GLib.idle_add(self.send_ping)

    def send_ping(self) -> bool:
        self.mark("channel_open")
        self.channel.emit("send-string", json.dumps(PING))
        return False

    def on_channel_message(self, _channel: Any, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            message = text
        GLib.idle_add(once, self.channel_message, message)

    def channel_message(self, message: Any) -> None:
        self.result["messages"].append(message)
        if isinstance(message, dict) and message.get("type") == "echo":
            self.mark("channel_echo")
            self.done("channel")

    def on_pad_added(self, _element: Gst.Element, pad: Gst.Pad) -> None:
        """The echo's RTP: decoded to S16LE mono into ``--pcm-out``."""
        if pad.get_direction() != Gst.PadDirection.SRC:
            return
        receive = Gst.parse_bin_from_description(
            "queue ! rtpopusdepay ! opusdec ! audioconvert ! audioresample "
            f"! audio/x-raw,format=S16LE,channels=1,rate={RATE_HZ} "
            "! appsink name=sink emit-signals=true sync=false",
            True,
        )
        self.pipeline.add(receive)
        receive.get_by_name("sink").connect("new-sample", self.on_sample)
        receive.sync_state_with_parent()
        if pad.link(receive.get_static_pad("sink")) != Gst.PadLinkReturn.OK:
            GLib.idle_add(once, self.fail, "cannot link the received pad")
            return
        GLib.idle_add(once, self.mark, "receiving")

    def on_sample(self, sink: Any) -> Gst.FlowReturn:
        sample = sink.emit("pull-sample")
        if sample is not None and self.pcm_bytes < self.pcm_limit and not self.pcm.closed:
            buffer = sample.get_buffer()
            data = buffer.extract_dup(0, buffer.get_size())
            self.pcm.write(data)
            self.pcm_bytes += len(data)
        return Gst.FlowReturn.OK

    def audio_heard(self) -> bool:
        """After the audio time: webrtcbin's stats, then the DELETE."""
        self.mark("audio_done")
        self.webrtc.emit("get-stats", None, Gst.Promise.new_with_change_func(self.on_stats))
        return False

    def on_stats(self, promise: Gst.Promise) -> None:
        reply = promise.get_reply()
        stats = all_stats(reply) if reply is not None else []
        GLib.idle_add(once, self.stats_read, stats)

    def stats_read(self, stats: list[dict[str, Any]]) -> None:
        self.result["stats"] = stats
        # What webrtcbin itself says after the audio time ("connecting" when the answer
        # rejected an m-line: watch_audio_transport).
        state = self.webrtc.get_property("connection-state").value_nick
        self.result["connection_state_after_audio"] = state
        self.result["pcm_bytes"] = self.pcm_bytes
        declined = "application" in self.result["rejected"]
        if "channel_echo" not in self.result["marks_ms"] and not declined:
            return  # the channel's deadline fails the call
        self.done("channel")
        log(f"DELETE {self.location}")
        self.delete_sent = True
        self.in_thread(lambda: http("DELETE", self.location, self.token), self.deleted)

    def deleted(self, reply: tuple[int, dict, str]) -> None:
        self.deleted_at = time.monotonic()
        self.result["delete_status"] = reply[0]
        self.mark("deleted")
        self.delete_again()

    def delete_again(self) -> bool:
        self.in_thread(lambda: http("DELETE", self.location, self.token), self.deleted_again)
        return False

    def deleted_again(self, reply: tuple[int, dict, str]) -> None:
        """A DELETE is answered once the teardown starts; the resource is gone once it ends:
        a DELETE then finds none (404). Asked again every ``GONE_POLL_S`` until ``GONE_S``."""
        self.result["later_delete_status"] = reply[0]
        assert self.deleted_at is not None
        waited = time.monotonic() - self.deleted_at
        if reply[0] != 404 and waited < GONE_S:
            GLib.timeout_add(int(GONE_POLL_S * 1000), self.delete_again)
            return
        self.mark("gone")
        self.result["ok"] = self.result["error"] is None
        self.loop.quit()

    def finish(self) -> None:
        for name in list(self.timers):
            self.done(name)
        self.pipeline.set_state(Gst.State.NULL)
        self.pcm.close()
        self.result["pcm_bytes"] = self.pcm_bytes
        self.mark("total")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--whip", help="the WHIP endpoint's URL")
    parser.add_argument("--pcm-out", help="the echo, decoded: S16LE mono 48 kHz")
    parser.add_argument("--token-file", type=Path, help="the WHIP bearer token, if one is wanted")
    parser.add_argument(
        "--local-address", default="127.0.0.1", help="the one address libnice gathers on"
    )
    parser.add_argument("--tone-hz", type=float, default=660.0)
    parser.add_argument(
        "--bundle-policy",
        choices=BUNDLE_POLICIES,
        default="none",
        help="webrtcbin's (its own default: none, an offer without a BUNDLE group)",
    )
    parser.add_argument("--audio-seconds", type=float, default=3.0, help="connected -> stats")
    parser.add_argument("--timeout", type=float, default=45.0, help="bound on the whole call, s")
    parser.add_argument(
        "--check", action="store_true", help="only say what of GStreamer is missing, if anything"
    )
    args = parser.parse_args()
    if not args.check and not (args.whip and args.pcm_out):
        parser.error("--whip and --pcm-out are required")
    return args


def missing_elements() -> list[str]:
    """The GStreamer elements a call needs that this machine lacks (and their packages)."""
    return [
        f"{element} ({package})"
        for element, package in ELEMENTS.items()
        if Gst.ElementFactory.find(element) is None
    ]


def main() -> int:
    die_with_parent()
    args = arguments()
    if GI_MISSING is not None:
        hint = "python3-gi gir1.2-gst-plugins-bad-1.0 gir1.2-nice-0.1"
        print(json.dumps({"ok": False, "missing": [f"{GI_MISSING} ({hint})"]}), flush=True)
        return 1
    Gst.init(None)
    if args.check:
        missing = missing_elements()
        print(json.dumps({"gstreamer": Gst.version_string(), "missing": missing}), flush=True)
        return 1 if missing else 0
    call = Call(args)

    def watchdog() -> None:
        call.result["error"] = "watchdog: the call did not finish"
        print(json.dumps(call.result, default=str), flush=True)
        os._exit(2)

    timer = threading.Timer(args.timeout + 15, watchdog)
    timer.daemon = True
    timer.start()
    result = call.run()
    timer.cancel()
    print(json.dumps(result, default=str), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
