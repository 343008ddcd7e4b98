"""Passing a DELETE or PATCH on to the transceiver that owns its session (``transceiver.routes``
decides; this is the I/O): a proxy, not a redirect, because the owner's address is a pod's,
reachable on the cluster network only, and a browser's fetch would have to follow a 307 across
origins (docs/transceiver.md, "Session resources from any pod"). A resume token's claim
(``claim``: a call moving off a draining transceiver) goes to its owner the same way, under
the same bounds.

Bounds (the attacker: anyone who can send requests to the public WHIP port, with any id):
- only an id signed with our keyring is forwarded, and only to the address our configuration
  gives its owner: no id, header or URL of the request chooses where a request goes;
- one hop: the forwarded request carries ``FORWARDED_HEADER`` and is never forwarded again;
- at most ``max_forwards`` forwards under way at once (more: ``busy``, 503 + Retry-After), each
  limited to ``timeout_s`` in all, the answer read up to ``MAX_ANSWER_BYTES``;
- no redirects followed, no cookies, no proxy from the environment.
"""

from __future__ import annotations

import json
import logging

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy

from common.config import format_host_port
from transceiver.routes import CLAIM_PATH, FORWARDED_HEADER, RESUME_HEADER, Claim, Forward

log = logging.getLogger("rtcedge.transceiver")

PASSED_REQUEST_HEADERS = ("Authorization", "Content-Type", "If-Match")
PASSED_ANSWER_HEADERS = ("Content-Type", "Allow", "WWW-Authenticate", "Retry-After", "ETag")
MAX_ANSWER_BYTES = 4096  # our own answers to DELETE/PATCH are one line of text
MAX_CLAIM_BYTES = 16 * 1024  # a claim's answer: the call id and the call's small metadata
# The owner's answer to a claim, by status: what the move's failure is called.
CLAIM_STATUS_REASONS = {404: "no_session", 409: "replayed", 410: "expired"}


class PeerForwarder:
    """Forwards to peers over one aiohttp client, opened at first use; ``close`` at cleanup."""

    def __init__(self, transceiver_id: int, timeout_s: float, max_forwards: int) -> None:
        self.transceiver_id = transceiver_id
        self.timeout_s = timeout_s
        self.max_forwards = max_forwards
        self.under_way = 0
        self._client: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        self._client = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            connector=aiohttp.TCPConnector(limit=self.max_forwards),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        return self._client

    async def forward(
        self, request: web.Request, route: Forward, resource_id: str, body: bytes | None
    ) -> web.Response | str:
        """The owner's answer (status, body, the headers a WHIP client reads), or why there is
        none: busy, owner_gone (nothing listens there: the pod and its calls are gone) or
        owner_failed (it timed out or broke the answer)."""
        url = f"http://{format_host_port(*route.address)}/whip/{resource_id}"
        headers = {h: request.headers[h] for h in PASSED_REQUEST_HEADERS if h in request.headers}
        answer = await self._exchange(
            request.method, url, headers, body, route.transceiver_id, MAX_ANSWER_BYTES
        )
        if isinstance(answer, str):
            return answer
        status, data, answer_headers = answer
        passed = {h: answer_headers[h] for h in PASSED_ANSWER_HEADERS if h in answer_headers}
        return web.Response(status=status, body=data, headers=passed)

    async def claim(self, claim: Claim, token: str) -> tuple[str, dict[str, str]] | str:
        """Claim a resume token from the call's owner: (call id, the call's metadata), or why
        not: the owner's refusal (no_session, replayed, expired: ``CLAIM_STATUS_REASONS``),
        or busy, owner_gone, owner_failed as for ``forward`` (an answer that is not what a
        claim answers is owner_failed)."""
        url = f"http://{format_host_port(*claim.address)}{CLAIM_PATH}"
        tid = claim.token.transceiver_id
        answer = await self._exchange(
            "POST", url, {RESUME_HEADER: token}, None, tid, MAX_CLAIM_BYTES
        )
        if isinstance(answer, str):
            return answer
        status, data, _ = answer
        if status != 200:
            return CLAIM_STATUS_REASONS.get(status, "owner_failed")
        try:
            doc = json.loads(data)
            call_id, metadata = doc["call_id"], doc["metadata"]
        except (ValueError, TypeError, KeyError):
            return "owner_failed"
        if (
            call_id != claim.token.call_id
            or not isinstance(metadata, dict)
            or not all(isinstance(v, str) for v in metadata.values())
        ):
            return "owner_failed"
        return call_id, metadata

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        owner: int,
        max_bytes: int,
    ) -> tuple[int, bytes, CIMultiDictProxy[str]] | str:
        """One bounded request to a peer, marked as forwarded: (status, body read up to
        ``max_bytes``, headers), or busy, owner_gone, owner_failed."""
        if self.under_way >= self.max_forwards:
            return "busy"
        headers = {**headers, FORWARDED_HEADER: str(self.transceiver_id)}
        self.under_way += 1
        try:
            client = self._client or self._open()
            async with client.request(
                method, url, headers=headers, data=body, allow_redirects=False
            ) as answer:
                return answer.status, await answer.content.read(max_bytes), answer.headers
        except aiohttp.ClientConnectorError as exc:  # refused, unreachable, or no such name
            log.info("transceiver %d unreachable at %s: %s", owner, url, exc)
            return "owner_gone"
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("transceiver %d failed a forwarded %s: %r", owner, method, exc)
            return "owner_failed"
        finally:
            self.under_way -= 1

    async def close(self, app: web.Application | None = None) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
