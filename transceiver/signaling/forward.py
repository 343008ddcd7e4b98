"""Passing a request on to the fellow transceiver that owns its session: the I/O.

A DELETE or PATCH goes to the transceiver that owns its session (``transceiver.ownership``
decides): a proxy, not a redirect, because the owner's address is a pod's, reachable on the
cluster network only, and a browser's fetch would have to follow a 307 across origins
(docs/transceiver.md, "Session resources from any pod"). A resume token's claim (``claim``: a
call moving off a draining transceiver) goes to its owner the same way, under the same bounds.

Bounds (the attacker: anyone who can send requests to the public WHIP port, with any id):
- only an id signed with our keyring is forwarded, and only to the address our configuration
  gives its owner: no id, header or URL of the request chooses where a request goes;
- one hop: the forwarded request carries ``FORWARDED_HEADER`` and is never forwarded again;
- slots of ``transceiver.signaling.forward_budget``: forwards in all, per owner and per
  client, claims apart, and an owner that timed out failed fast for a few seconds (more: busy,
  owner_busy, client_busy, owner_failing: 503 + Retry-After);
- each exchange limited to ``connect_timeout_s`` to connect and ``timeout_s`` in all, the answer
  read up to ``MAX_ANSWER_BYTES``;
- no redirects followed, no cookies, no proxy from the environment.
"""

from __future__ import annotations

import json
import logging
import time

import aiohttp
from aiohttp import web
from multidict import CIMultiDictProxy

from common.config import format_host_port
from common.verdict import Refuse
from transceiver.ownership import CLAIM_PATH, FORWARDED_HEADER, RESUME_HEADER, Claim, Forward
from transceiver.signaling.forward_budget import PeerBudget, PeerLimits, Slot

log = logging.getLogger("rtcedge.transceiver")

PASSED_REQUEST_HEADERS = ("Authorization", "Content-Type", "If-Match")
PASSED_ANSWER_HEADERS = ("Content-Type", "Allow", "WWW-Authenticate", "Retry-After", "ETag")
POOL_IDLE_S = 2.0  # an idle connection to a peer is kept this long (aiohttp's default: 15 s)
MAX_ANSWER_BYTES = 4096  # our own answers to DELETE/PATCH are one line of text
MAX_CLAIM_BYTES = 16 * 1024  # a claim's answer: the call id and the call's small metadata
# The owner's answer to a claim, by status: what the move's failure is called.
CLAIM_STATUS_REASONS = {404: "no_session", 409: "replayed", 410: "expired"}
_CLAIM_REFUSALS = {status: Refuse(reason) for status, reason in CLAIM_STATUS_REASONS.items()}
OWNER_GONE = Refuse("owner_gone")  # nothing listens at its address: the pod and its calls are gone
OWNER_FAILED = Refuse("owner_failed")  # it timed out, or broke the answer


class PeerForwarder:
    """Forwards to peers over one aiohttp client, opened at first use; ``close`` at cleanup."""

    def __init__(
        self,
        transceiver_id: int,
        timeout_s: float,
        limits: PeerLimits,
        connect_timeout_s: float | None = None,
    ) -> None:
        self.transceiver_id = transceiver_id
        self.timeout_s = timeout_s
        self.connect_timeout_s = min(connect_timeout_s or timeout_s, timeout_s)
        self.budget = PeerBudget(limits)
        self._client: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        limits = self.budget.limits
        self._client = aiohttp.ClientSession(
            # ``connect``: the name's lookup and the TCP handshake (no wait for the pool: it
            # holds as many connections as there are slots).
            timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=self.connect_timeout_s),
            # Idle pooled connections are let go after POOL_IDLE_S, well before a peer's
            # listener closes them (its header timeout, 10 s by default, also runs between
            # requests): a request is never written onto a connection the peer is closing.
            connector=aiohttp.TCPConnector(
                limit=limits.max_forwards + limits.max_claims, keepalive_timeout=POOL_IDLE_S
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )
        return self._client

    async def forward(
        self,
        request: web.Request,
        route: Forward,
        resource_id: str,
        body: bytes | None,
        client: str,
    ) -> web.Response | Refuse:
        """The owner's answer (status, body, the headers a WHIP client reads), or why there is
        none: no slot (``transceiver.signaling.forward_budget.BUDGET_REASONS``; ``client``: whose
        request, ``transceiver.signaling.clients.client_key``), owner_gone (nothing listens
        there: the pod and its calls are gone) or owner_failed (it timed out or broke the
        answer)."""
        slot = self.budget.take_forward(route.transceiver_id, client, time.monotonic())
        if isinstance(slot, Refuse):
            return slot
        url = f"http://{format_host_port(*route.address)}/whip/{resource_id}"
        headers = {h: request.headers[h] for h in PASSED_REQUEST_HEADERS if h in request.headers}
        answer = await self._exchange(request.method, url, headers, body, slot, MAX_ANSWER_BYTES)
        if isinstance(answer, Refuse):
            return answer
        status, data, answer_headers = answer
        passed = {h: answer_headers[h] for h in PASSED_ANSWER_HEADERS if h in answer_headers}
        return web.Response(status=status, body=data, headers=passed)

    async def claim(self, claim: Claim, token: str) -> tuple[str, dict[str, str]] | Refuse:
        """Claim a resume token from the call's owner: (call id, the call's metadata), or why
        not: the owner's refusal (no_session, replayed, expired: ``CLAIM_STATUS_REASONS``),
        or no slot (busy, owner_failing: the claims' own budget), owner_gone, owner_failed as
        for ``forward`` (an answer that is not what a claim answers is owner_failed)."""
        slot = self.budget.take_claim(claim.token.transceiver_id, time.monotonic())
        if isinstance(slot, Refuse):
            return slot
        url = f"http://{format_host_port(*claim.address)}{CLAIM_PATH}"
        answer = await self._exchange(
            "POST", url, {RESUME_HEADER: token}, None, slot, MAX_CLAIM_BYTES
        )
        if isinstance(answer, Refuse):
            return answer
        status, data, _ = answer
        if status != 200:
            return _CLAIM_REFUSALS.get(status, OWNER_FAILED)
        try:
            doc = json.loads(data)
            call_id, metadata = doc["call_id"], doc["metadata"]
        except (ValueError, TypeError, KeyError):
            return OWNER_FAILED
        if (
            call_id != claim.token.call_id
            or not isinstance(metadata, dict)
            or not all(isinstance(v, str) for v in metadata.values())
        ):
            return OWNER_FAILED
        return call_id, metadata

    async def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        slot: Slot,
        max_bytes: int,
    ) -> tuple[int, bytes, CIMultiDictProxy[str]] | Refuse:
        """One bounded request to a peer, marked as forwarded, holding ``slot`` until it is
        over: (status, body read up to ``max_bytes``, headers), or owner_gone, owner_failed."""
        headers = {**headers, FORWARDED_HEADER: str(self.transceiver_id)}
        timed_out = False
        try:
            client = self._client or self._open()
            async with client.request(
                method, url, headers=headers, data=body, allow_redirects=False
            ) as answer:
                return answer.status, await answer.content.read(max_bytes), answer.headers
        except TimeoutError as exc:  # connecting, or the whole exchange (aiohttp's are both)
            log.warning("transceiver %d timed out on a forwarded %s: %r", slot.owner, method, exc)
            timed_out = True
            return OWNER_FAILED
        except aiohttp.ClientConnectorError as exc:  # refused, unreachable, or no such name
            log.info("transceiver %d unreachable at %s: %s", slot.owner, url, exc)
            return OWNER_GONE
        except aiohttp.ClientError as exc:
            log.warning("transceiver %d failed a forwarded %s: %r", slot.owner, method, exc)
            return OWNER_FAILED
        finally:
            self.budget.release(slot, timed_out, time.monotonic())

    async def close(self, app: web.Application | None = None) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
