"""WHIP signaling: the answer, and a precise status for every kind of bad request."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import aiohttp

from common.sessionid import verify_session_id
from testbed.ports import free_port
from tests.support.inprocess import direct_config, running
from tests.support.tone_call import run_client
from tests.support.waits import run, wait_until
from tests.support.whip import SDP, make_offer, post
from transceiver.backend import Backend, SessionInfo
from transceiver.backends import create_backend
from transceiver.signaling.tokens import mint

SECRET = b"0123456789abcdef0123456789abcdef"


def test_answer_has_location_etag_and_only_the_advertised_candidate():
    async def go():
        cfg = direct_config()
        async with running(cfg) as (server, url):
            status, body, headers = await post(url, await make_offer())
            assert status == 201, body
            location = headers["Location"]
            assert re.fullmatch(r"/whip/[A-Za-z0-9_-]{48}", location), "a short URL-safe id"
            sid = verify_session_id(server.keyring, location[6:], time.time(), 300)
            assert sid.owner == (cfg.cluster, cfg.transceiver_id), "it names its owner"
            session = server.sessions[sid.call_id]
            assert session.resource_id == location[6:]
            assert headers["ETag"] == f'"{session.ufrag}"'
            assert headers["Content-Type"].startswith("application/sdp")
            candidates = [x for x in body.splitlines() if x.startswith("a=candidate:")]
            assert len(set(candidates)) == 1, "one candidate (repeated per bundled m-line)"
            assert f"127.0.0.1 {cfg.advertise[1]} typ host" in candidates[0]
            assert f"a=ice-ufrag:{session.ufrag}" in body
            assert headers["Access-Control-Expose-Headers"].startswith("Location")

    run(go())


def test_bad_requests_get_precise_statuses():
    async def go():
        cfg = direct_config(max_sdp_bytes=20_000)
        async with running(cfg) as (server, url):
            offer = await make_offer()
            no_audio = await make_offer(audio=False)
            # An offer without BUNDLE is answered (on its audio m-line: test_bundle.py); one
            # whose group leaves its audio out is not.
            mids = re.search(r"a=group:BUNDLE (.*)\r\n", offer).group(1).split()
            audio_out = offer.replace(" ".join(mids), mids[-1])
            pcmu_only = re.sub(r"m=audio (\d+) (\S+) [\d ]+", r"m=audio \1 \2 0", offer)
            pcmu_only = "\r\n".join(
                x
                for x in pcmu_only.split("\r\n")
                if not re.match(r"a=(rtpmap|fmtp|rtcp-fb):(?!0 )", x)
            )
            cases = [
                (offer, {"Content-Type": "text/plain"}, 415, "application/sdp"),
                ("v=0\r\n" + "a=x\r\n" * 10_000, SDP, 413, "larger than"),
                ("hello", SDP, 400, "malformed SDP"),
                (b"v=0\xff\xfe", SDP, 400, "UTF-8"),
                (no_audio, SDP, 400, "no audio m-line"),
                (audio_out, SDP, 400, "the audio m-line must be in the BUNDLE group"),
                (pcmu_only, SDP, 400, "opus is required"),
            ]
            for body, headers, status, reason in cases:
                got, text, _ = await post(url, body, headers)
                assert (got, reason in text) == (status, True), (status, reason, got, text)
            assert not server.sessions, "no session was created by a bad request"
            async with aiohttp.ClientSession() as http:
                async with http.delete(f"{url}/whip/{'0' * 32}") as r:
                    assert r.status == 404
                async with http.options(f"{url}/whip") as r:
                    assert r.status == 204 and r.headers["Accept-Post"] == "application/sdp"
                    assert r.headers["Access-Control-Allow-Origin"] == "*"
                status, _, headers = await post(url, offer)
                async with http.patch(f"{url}{headers['Location']}", data="x") as r:
                    assert r.status == 405 and "ICE restart" in await r.text()

    run(go())


def test_bearer_token_is_required_when_configured():
    async def go():
        async with running(direct_config(auth_token="s3cret")) as (server, url):
            offer = await make_offer()
            status, _, headers = await post(url, offer)
            assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
            status, _, _ = await post(url, offer, {**SDP, "Authorization": "Bearer wrong"})
            assert status == 401
            assert server.metrics.whip_requests.labels("POST", "401")._value.get() == 2
            status, _, headers = await post(url, offer, {**SDP, "Authorization": "Bearer s3cret"})
            assert status == 201
            async with aiohttp.ClientSession() as http:
                async with http.delete(f"{url}{headers['Location']}") as r:
                    assert r.status == 401
                async with http.delete(
                    f"{url}{headers['Location']}", headers={"Authorization": "Bearer s3cret"}
                ) as r:
                    assert r.status == 200

    run(go())


async def raw_post(cfg, head: bytes) -> bytes:
    """A POST written byte by byte (aiohttp's client would refuse such headers); its status."""
    reader, writer = await asyncio.open_connection(*cfg.http)
    writer.write(
        b"POST /whip HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\n"
        + head
        + b"Content-Length: 3\r\n\r\nv=0"
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    await writer.wait_closed()
    return status_line


def test_a_non_utf8_authorization_header_is_401_not_500():
    async def go():
        for cfg in (
            direct_config(auth_token="s3cret"),
            direct_config(token_secrets=(SECRET,)),
            direct_config(auth_token="s3cret", token_secrets=(SECRET,)),
        ):
            async with running(cfg) as (server, _):
                for value in (b"Bearer \xff\xfe", b"\xc3(", b"Bearer s3cret\x80"):
                    status_line = await raw_post(cfg, b"Authorization: " + value + b"\r\n")
                    assert b" 401 " in status_line, (value, status_line)
                assert server.metrics.whip_requests.labels("POST", "500")._value.get() == 0

    run(go())


class RecordingBackend(Backend):
    """The echo backend, remembering what each session was opened with."""

    def __init__(self) -> None:
        self.echo = create_backend("echo")
        self.infos: list[SessionInfo] = []

    async def open_session(self, info, emit_audio, emit_event, on_failure):  # type: ignore[no-untyped-def]
        self.infos.append(info)
        return await self.echo.open_session(info, emit_audio, emit_event, on_failure)


def test_signed_tokens_start_sessions_and_an_expired_one_still_ends_its_call():
    async def go():
        backend = RecordingBackend()
        cfg = direct_config(auth_token="s3cret", token_secrets=(b"x" * 32, SECRET))
        async with running(cfg, backend) as (_, url):
            offer = await make_offer()
            token = mint(SECRET, time.time(), 60, subject="alice")
            auth = {"Authorization": f"Bearer {token}"}
            status, _, headers = await post(url, offer, {**SDP, **auth})
            assert status == 201
            assert backend.infos[-1].metadata["subject"] == "alice", "the backend learns who"
            assert (await post(url, offer, {**SDP, "Authorization": "Bearer s3cret"}))[0] == 201
            expired = mint(SECRET, time.time() - 120, 60, subject="alice")
            status, text, _ = await post(url, offer, {**SDP, "Authorization": f"Bearer {expired}"})
            assert (status, text) == (401, "token expired\n")
            forged = mint(b"f" * 32, time.time(), 60, subject="alice")
            status, text, _ = await post(url, offer, {**SDP, "Authorization": f"Bearer {forged}"})
            assert (status, text) == (401, "missing or invalid bearer token\n")
            too_long = mint(SECRET, time.time(), 2 * 3600)
            status, _, _ = await post(url, offer, {**SDP, "Authorization": f"Bearer {too_long}"})
            assert status == 401
            async with aiohttp.ClientSession() as http:
                # A call outlives its token: DELETE takes one whose signature is good.
                bad = {"Authorization": f"Bearer {forged}"}
                async with http.delete(f"{url}{headers['Location']}", headers=bad) as r:
                    assert r.status == 401
                ok = {"Authorization": f"Bearer {expired}"}
                async with http.delete(f"{url}{headers['Location']}", headers=ok) as r:
                    assert r.status == 200

    run(go())


def test_a_missing_backend_answers_503_without_its_url():
    async def go():
        dead = free_port(kind=socket.SOCK_STREAM)  # nothing listens there
        url_with_secret = f"ws://user:PASSWORD@127.0.0.1:{dead}/call?key=APIKEY"
        cfg = direct_config(backend="websocket", backend_url=url_with_secret)
        async with running(cfg) as (server, url):
            status, text, headers = await post(url, await make_offer())
            assert (status, text) == (503, "backend unavailable\n")
            assert headers["Retry-After"]
            assert "PASSWORD" not in text and "APIKEY" not in text and str(dead) not in text
            assert server.metrics.backend_errors._value.get() == 1

    run(go())


def test_session_limit_and_draining_answer_503_with_retry_after():
    async def go():
        async with running(direct_config(max_sessions=1)) as (server, url):
            assert (await post(url, await make_offer()))[0] == 201
            status, text, headers = await post(url, await make_offer())
            assert status == 503 and headers["Retry-After"] and "limit" in text
            server.draining = True
            async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as r:
                assert r.status == 503
            status, text, headers = await post(url, await make_offer())
            assert status == 503 and "draining" in text and headers["Retry-After"]

    run(go())


def test_connect_and_disconnect_200_times_leaves_nothing_behind():
    async def go():
        async with running(direct_config()) as (server, url):
            baseline = len(asyncio.all_tasks())

            async def cycle(i: int) -> None:
                r = await run_client(url, 440 + i % 7 * 110, seconds=0.0)
                assert r.connected and not r.error, r.error

            for start in range(0, 200, 20):
                await asyncio.gather(*(cycle(i) for i in range(start, start + 20)))
            await wait_until(lambda: not server.sessions and len(asyncio.all_tasks()) <= baseline)
            assert server.sessions == {}
            assert len(server.demux) == 0 and server.demux.addresses == 0
            assert len(asyncio.all_tasks()) <= baseline, "no task left behind"
            m = server.metrics
            assert m.sessions_ended.labels("deleted")._value.get() == 200
            assert m.sessions_active._value.get() == 0

    run(go(), timeout_s=240)


def test_a_slow_client_gets_408_and_holds_nothing():
    async def go():
        cfg = direct_config(body_timeout_s=0.5)
        async with running(cfg) as (server, _):
            reader, writer = await asyncio.open_connection(*cfg.http)
            writer.write(
                b"POST /whip HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\n"
                b"Content-Length: 1000\r\n\r\nv=0\r\n"
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), 5)
            assert b" 408 " in status_line
            writer.close()
            await writer.wait_closed()
            assert not server.sessions

    run(go())
