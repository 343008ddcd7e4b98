"""OpenAI's Realtime WebRTC door: client secrets minted for an operator's API key, a real aiortc
caller offering to /v1/realtime/calls (SDP or the form with a session), the session each party
may set, the oai-events channel both ways, and a refusal for each bad request."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import struct
import time

import aiohttp
import av
import pytest
from aiohttp import web
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from openai.types.realtime import RealtimeClientEvent
from prometheus_client import generate_latest
from pydantic import TypeAdapter

from testbed.callers import RATE, ToneTrack, goertzel_power
from tests.support.inprocess import direct_config, running
from tests.support.realtime_server import Server
from tests.support.waits import run, wait_until
from transceiver.backends.realtime.backend import APP_SESSION_KEY
from transceiver.backends.realtime.policy import ClientEventPolicy
from transceiver.signaling.gate import Caller, Gate
from transceiver.signaling.realtime_calls import RealtimeCalls, parse_call_form
from transceiver.signaling.tokens import REALTIME_AUDIENCE, mint

SECRET = b"s" * 32  # signs client secrets (--token-secret-file)
KEY = "sk-operator-" + "k" * 32  # an app server's API key (--realtime-key-file)
CLIENT = TypeAdapter(RealtimeClientEvent)
ANSWER_HZ = 660.0
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]


def form(sdp: str, session: object = None, boundary: str = "b0undary") -> tuple[str, bytes]:
    """A multipart/form-data body as browsers send ``FormData`` (RFC 7578)."""
    parts = [("sdp", sdp)] + ([] if session is None else [("session", json.dumps(session))])
    body = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in parts
    )
    return f"multipart/form-data; boundary={boundary}", f"{body}--{boundary}--\r\n".encode()


# -- the body and the session, sans-I/O ------------------------------------------------------------
def test_a_form_carries_the_offer_and_the_session():
    content_type, body = form("v=0\r\ns=-\r\n", {"audio": {"output": {"voice": "marin"}}})
    parsed = parse_call_form(content_type, body)
    assert parsed.offer == b"v=0\r\ns=-\r\n"
    assert parsed.session == {"audio": {"output": {"voice": "marin"}}}
    assert parse_call_form("application/sdp", b"v=0").offer == b"v=0"


@pytest.mark.parametrize(
    ("content_type", "body", "says"),
    [
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="session"\r\n\r\n{}\r\n--b--\r\n',
            "no 'sdp'",
        ),
        ("multipart/form-data", b"v=0", "not multipart"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="session"\r\n\r\n{x\r\n--b\r\n'
            b'Content-Disposition: form-data; name="sdp"\r\n\r\nv=0\r\n--b--\r\n',
            "not JSON",
        ),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="sdp"\r\n\r\nv=0\r\n--b\r\n'
            b'Content-Disposition: form-data; name="sdp"\r\n\r\nv=0\r\n--b--\r\n',
            "given twice",
        ),
    ],
)
def test_a_bad_form_says_what_is_wrong(content_type, body, says):
    with pytest.raises(ValueError, match=says):
        parse_call_form(content_type, body)


def test_a_caller_sets_only_what_the_policy_allows_and_the_app_server_anything():
    calls = RealtimeCalls(Gate(None, None), ClientEventPolicy(), 16_384)
    granted = Caller(session={"instructions": "app", "audio": {"output": {"voice": "alloy"}}})
    voice = {"audio": {"output": {"voice": "marin"}}}
    assert calls.session(granted, voice) == {"instructions": "app", **voice}
    assert calls.session(granted, None) == granted.session
    refused = calls.session(granted, {"model": "another", "tools": []})
    assert (refused.status, refused.reason) == (403, "session_refused")  # type: ignore[union-attr]
    assert "session.model" in refused.text  # type: ignore[union-attr]
    assert calls.session(Caller(operator=True), {"model": "another"}) == {"model": "another"}
    bad = calls.session(Caller(), {"audio": {"input": {"format": {"type": "audio/pcmu"}}}})
    assert bad.status == 400 and bad.reason == "invalid_session"  # type: ignore[union-attr]
    content_type, body = form("v=0", voice)
    offer, metadata = calls.read(granted, content_type, body)  # type: ignore[misc]
    assert calls.read(granted, "multipart/form-data", b"v=0").reason == "invalid_form"  # type: ignore[union-attr]
    assert offer == b"v=0" and json.loads(metadata[APP_SESSION_KEY])["instructions"] == "app"


def test_the_gate_knows_an_api_key_a_client_secret_and_nothing_else():
    from transceiver.signaling.tokens import TokenVerifier

    gate = Gate(None, TokenVerifier((SECRET,), 3600, REALTIME_AUDIENCE), (KEY.encode(),))
    now = time.time()
    assert gate.caller(f"Bearer {KEY}", now) == Caller(operator=True)
    secret = mint(SECRET, now, 60, audience=REALTIME_AUDIENCE, session={"instructions": "x"})
    assert gate.caller(f"Bearer {secret}", now) == Caller(session={"instructions": "x"})
    whip_token = mint(SECRET, now, 60)  # another audience: not a client secret
    assert gate.caller(f"Bearer {whip_token}", now).reason == "wrong_audience"  # type: ignore[union-attr]
    assert gate.caller("", now).status == 401  # type: ignore[union-attr]


# -- over HTTP, with a real caller ----------------------------------------------------------------
def realtime_config(url: str, **overrides):
    settings = {
        "backend": "realtime",
        "backend_url": url,
        "token_secrets": (SECRET,),
        "realtime_keys": (KEY.encode(),),
        "realtime_session": {"instructions": "the operator's", "model": "operator-model"},
    }
    return direct_config(**{**settings, **overrides})


async def mint_secret(http: aiohttp.ClientSession, base: str, body: dict) -> tuple[int, dict]:
    async with http.post(
        f"{base}/v1/realtime/client_secrets", json=body, headers={"Authorization": f"Bearer {KEY}"}
    ) as r:
        return r.status, await r.json()


def tone_24k(hz: float, seconds: float) -> bytes:
    n = int(24000 * seconds)
    return struct.pack(
        f"<{n}h", *(int(8000 * math.sin(2 * math.pi * hz * i / 24000)) for i in range(n))
    )


async def heard(track: MediaStreamTrack, frames: list[int]) -> None:
    """Counts the caller's received frames that carry the answer's tone."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    while True:
        try:
            frame = await track.recv()
        except MediaStreamError:
            return
        for f in resampler.resample(frame):
            samples = struct.unpack(f"<{f.samples}h", bytes(f.planes[0])[: f.samples * 2])
            total = sum(x * x for x in samples) * len(samples) / 2 + 1.0
            if goertzel_power(samples, ANSWER_HZ) > 0.2 * total:
                frames[0] += 1


async def settled(count: list[int], idle_s: float = 0.3, timeout_s: float = 10.0) -> bool:
    """True once ``count[0]`` stops changing for ``idle_s``; False after ``timeout_s``."""
    deadline, last = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        if count[0] == last:
            return True
        last = count[0]
        await asyncio.sleep(idle_s)
    return False


def test_a_browser_flow_call_talks_to_the_model_server_both_ways():
    async def model(ws: web.WebSocketResponse, received: list) -> None:
        await ws.send_json({"type": "session.created", "event_id": "e0", "session": {}})
        await wait_until(
            lambda: sum(e["type"] == "input_audio_buffer.append" for e in received) >= 10
        )
        await ws.send_json(
            {"type": "response.output_audio.delta", "event_id": "e1", "response_id": "r1",
             "item_id": "item_1", "output_index": 0, "content_index": 0,
             "delta": base64.b64encode(tone_24k(ANSWER_HZ, 0.6)).decode()}
        )  # fmt: skip
        await wait_until(lambda: any(e["type"] == "conversation.item.create" for e in received))
        await ws.send_json({"type": "response.done", "event_id": "e2", "response": {"id": "r1"}})
        await wait_until(lambda: ws.closed, 15)

    async def go() -> None:
        async with Server(model) as server, running(realtime_config(server.url)) as (trx, base):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTrack(ToneTrack(440))
            channel = pc.createDataChannel("oai-events")
            events: list[dict] = []
            channel.on("message", lambda m: events.append(json.loads(m)))
            frames = [0]
            tasks: list[asyncio.Task] = []
            pc.on("track", lambda track: tasks.append(asyncio.ensure_future(heard(track, frames))))
            try:
                async with aiohttp.ClientSession() as http:
                    app_session = {
                        "instructions": "the app's",
                        "audio": {"output": {"voice": "alloy"}},
                    }
                    status, minted = await mint_secret(http, base, {"session": app_session})
                    assert status == 200 and minted["session"]["instructions"] == "the app's"
                    assert minted["expires_at"] > time.time() and minted["session"][
                        "id"
                    ].startswith("sess_")
                    await pc.setLocalDescription(await pc.createOffer())
                    data = aiohttp.FormData(default_to_multipart=True)  # as browsers send it
                    data.add_field("sdp", pc.localDescription.sdp)
                    data.add_field("session", json.dumps({"audio": {"output": {"voice": "marin"}}}))
                    bearer = {"Authorization": f"Bearer {minted['value']}"}
                    async with http.post(
                        f"{base}/v1/realtime/calls", data=data, headers=bearer
                    ) as r:
                        answer = await r.text()
                        assert r.status == 201, answer
                        location = r.headers["Location"]
                    assert re.fullmatch(r"/v1/realtime/calls/[A-Za-z0-9_-]{48}", location)
                    await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
                    assert await wait_until(lambda: channel.readyState == "open", 15)
                    channel.send(
                        json.dumps({"type": "session.update", "session": {"model": "evil"}})
                    )
                    assert await wait_until(lambda: any(e["type"] == "error" for e in events))
                    channel.send(json.dumps(
                        {"type": "conversation.item.create", "item": {"type": "message",
                         "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}
                    ))  # fmt: skip
                    assert await wait_until(lambda: frames[0] >= 10, 15), frames
                    assert await wait_until(
                        lambda: any(e["type"] == "response.done" for e in events)
                    )
                    async with http.post(f"{base}{location}/hangup", headers=bearer) as r:
                        assert r.status == 200, await r.text()
                    assert await wait_until(lambda: not trx.sessions)
                    scraped = generate_latest(trx.metrics.registry).decode()
            finally:
                for task in tasks:
                    task.cancel()
                await pc.close()
        sent = server.received[0]
        for event in sent:
            CLIENT.validate_python(event)
        first = sent[0]["session"]
        assert sent[0]["type"] == "session.update"
        assert first["instructions"] == "the operator's" and first["model"] == "operator-model"
        assert first["audio"]["output"]["voice"] == "marin", "the caller's form over the app's"
        assert first["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
        assert [e["type"] for e in sent].count("session.update") == 1, "the evil one never sent"
        appends = [e for e in sent if e["type"] == "input_audio_buffer.append"]
        assert all(len(base64.b64decode(e["audio"])) == 960 for e in appends), "20 ms at 24 kHz"
        error = next(e for e in events if e["type"] == "error")
        assert "session.model" in error["error"]["message"]
        assert events[0]["type"] == "session.created"
        counted = dict(re.findall(r'backend_events_total\{event="(\w+)"\} (\S+)', scraped))
        assert float(counted["caller_events_refused"]) == 1.0, counted
        assert float(counted["appends"]) == len(appends) and float(counted["deltas"]) == 1.0

    run(go(), 60)


def test_a_barge_in_stops_the_answer_and_the_truncate_says_what_the_caller_heard():
    async def model(ws: web.WebSocketResponse, received: list) -> None:
        await ws.send_json({"type": "session.created", "event_id": "e0", "session": {}})
        await wait_until(
            lambda: sum(e["type"] == "input_audio_buffer.append" for e in received) >= 5
        )
        await ws.send_json(
            {"type": "response.output_audio.delta", "event_id": "e1", "response_id": "r1",
             "item_id": "item_1", "output_index": 0, "content_index": 0,
             "delta": base64.b64encode(tone_24k(ANSWER_HZ, 3.0)).decode()}
        )  # fmt: skip
        await wait_until(lambda: frames[0] >= 25, 15)  # the caller has heard half a second
        await ws.send_json(
            {"type": "input_audio_buffer.speech_started", "event_id": "e2", "audio_start_ms": 900,
             "item_id": "item_2"}
        )  # fmt: skip
        await wait_until(lambda: any(e["type"] == "conversation.item.truncate" for e in received))
        await wait_until(lambda: ws.closed, 15)

    frames = [0]

    async def go() -> None:
        async with Server(model) as server, running(realtime_config(server.url)) as (_, base):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTrack(ToneTrack(440))
            channel = pc.createDataChannel("oai-events")
            events: list[dict] = []
            channel.on("message", lambda m: events.append(json.loads(m)))
            tasks: list[asyncio.Task] = []
            pc.on("track", lambda track: tasks.append(asyncio.ensure_future(heard(track, frames))))
            try:
                async with aiohttp.ClientSession() as http:
                    await pc.setLocalDescription(await pc.createOffer())
                    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/sdp"}
                    async with http.post(
                        f"{base}/v1/realtime/calls", data=pc.localDescription.sdp, headers=headers
                    ) as r:
                        answer = await r.text()
                        assert r.status == 201, answer
                    await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
                    assert await wait_until(
                        lambda: any(e["type"] == "output_audio_buffer.cleared" for e in events), 20
                    ), [e["type"] for e in events]
                    # What was sent before the cut arrives; nothing after it does.
                    assert await settled(frames)
                    heard_ms = frames[0] * 20
            finally:
                for task in tasks:
                    task.cancel()
                await pc.close()
        truncate = next(e for e in server.received[0] if e["type"] == "conversation.item.truncate")
        assert truncate["item_id"] == "item_1" and truncate["content_index"] == 0
        assert abs(truncate["audio_end_ms"] - heard_ms) <= 40, (truncate, heard_ms)
        assert heard_ms < 2000, "the answer (3 s) stopped at the barge-in"
        assert {"response.cancel"} & {e["type"] for e in server.received[0]} == set(), (
            "server VAD cancels its own response (OpenAI's behaviour)"
        )

    run(go(), 60)


def test_the_calls_door_refuses_each_bad_request_with_its_reason():
    async def model(ws: web.WebSocketResponse, received: list) -> None:
        await ws.send_json({"type": "session.created", "event_id": "e0", "session": {}})
        await wait_until(lambda: ws.closed, 15)

    async def go() -> None:
        async with (
            Server(model) as server,
            running(cfg := realtime_config(server.url)) as (_, base),
        ):
            pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            pc.addTrack(ToneTrack(440))
            pc.createDataChannel("oai-events")
            await pc.setLocalDescription(await pc.createOffer())
            offer = pc.localDescription.sdp
            await pc.close()
            now = time.time()
            secret = mint(SECRET, now, 60, audience=REALTIME_AUDIENCE)
            expired = mint(SECRET, now - 120, 60, audience=REALTIME_AUDIENCE)
            sdp = {"Content-Type": "application/sdp"}

            async def call(bearer: str, body: bytes | str, headers=sdp) -> tuple[int, str]:
                auth = {"Authorization": f"Bearer {bearer}"} if bearer else {}
                async with http.post(
                    f"{base}/v1/realtime/calls", data=body, headers={**headers, **auth}
                ) as r:
                    return r.status, (await r.text()).strip()

            async with aiohttp.ClientSession() as http:
                assert (await call("", offer))[0] == 401
                assert (await call(mint(SECRET, now, 60), offer))[0] == 401, "a WHIP token"
                assert await call(expired, offer) == (401, "token expired")
                content_type, body = form(offer, {"tools": [{"type": "function", "name": "x"}]})
                status, text = await call(secret, body, {"Content-Type": content_type})
                assert status == 403 and "session.tools" in text
                assert len(server.received) == 0, "a refused call never reaches the model server"
                assert (await call(secret, offer, {"Content-Type": "text/plain"}))[0] == 415
                content_type, _ = form(offer)
                no_offer = (
                    b'--b0undary\r\nContent-Disposition: form-data; name="x"\r\n\r\n1\r\n'
                    b"--b0undary--\r\n"
                )
                status, text = await call(secret, no_offer, {"Content-Type": content_type})
                assert status == 400 and "no 'sdp' field" in text
                status, text = await call(KEY, form(offer, {"tools": TOOLS, "model": "m2"})[1],
                                          {"Content-Type": form(offer)[0]})  # fmt: skip
                assert status == 201, text  # an app server's API key is trusted with tools
                assert await wait_until(lambda: len(server.received) == 1)
                first = server.received[0][0]["session"]
                assert first["tools"] == TOOLS and first["model"] == "operator-model", "its own"
                # A form holds a whole offer and a whole session: 9 KB + 7 KB passes.
                padded = offer.replace(
                    "a=mid:0\r\n", "a=mid:0\r\n" + f"a=x-pad:{'p' * 52}\r\n" * 150, 1
                )
                big = {"tools": TOOLS, "instructions": "i" * 7000}
                content_type, body = form(padded, big)
                assert len(padded) > 9000 and len(body) > cfg.max_sdp_bytes
                status, text = await call(KEY, body, {"Content-Type": content_type})
                assert status == 201, text
                status, minted = await mint_secret(http, base, {"expires_after": {"seconds": 5}})
                assert status == 400 and "expires_after.seconds" in minted["error"]["message"]
                async with http.post(
                    f"{base}/v1/realtime/client_secrets", json={},
                    headers={"Authorization": f"Bearer {secret}"},
                ) as r:  # fmt: skip
                    assert r.status == 401, "a client secret mints no client secret"
                async with http.post(f"{base}/v1/realtime/calls/unknown/hangup") as r:
                    assert r.status in (401, 404)
                async with http.get(f"{base}/realtime") as r:
                    assert r.status == 200 and "realtime.js" in await r.text()

    run(go(), 60)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"realtime_keys": ()}, "--realtime-key-file"),
        ({"token_secrets": ()}, "--token-secret-file"),
    ],
)
def test_client_secrets_need_keys_and_a_signing_secret(overrides, says):
    async def go() -> None:
        cfg = realtime_config("ws://127.0.0.1:9/v1/realtime?model=m", **overrides)
        async with running(cfg) as (_, base), aiohttp.ClientSession() as http:
            status, answer = await mint_secret(http, base, {})
            assert status == 503 and says in answer["error"]["message"]

    run(go(), 20)


def test_the_static_token_guards_the_calls_door_too():
    async def go() -> None:
        cfg = realtime_config(
            "ws://127.0.0.1:9/v1/realtime?model=m", token_secrets=(), realtime_keys=(),
            auth_token="t" * 32,
        )  # fmt: skip
        async with running(cfg) as (_, base), aiohttp.ClientSession() as http:
            sdp = {"Content-Type": "application/sdp"}
            async with http.post(f"{base}/v1/realtime/calls", data="v=0", headers=sdp) as r:
                assert r.status == 401
            bearer = {**sdp, "Authorization": "Bearer " + "t" * 32}
            async with http.post(f"{base}/v1/realtime/calls", data="v=0", headers=bearer) as r:
                assert r.status == 400, "past the gate: the offer itself is refused"

    run(go(), 20)


def test_without_the_realtime_backend_there_is_no_realtime_door():
    async def go() -> None:
        async with running(direct_config()) as (_, base), aiohttp.ClientSession() as http:
            async with http.post(f"{base}/v1/realtime/calls", data="v=0") as r:
                assert r.status == 404
            async with http.post(f"{base}/v1/realtime/client_secrets", json={}) as r:
                assert r.status == 404

    run(go(), 20)
