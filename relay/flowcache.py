"""Optional Redis cache of confirmed flows, so a replaced relay recovers flows in milliseconds.

Redis is never required and never on the packet path: a worker hands requests to a thread of its
own through a queue and picks results up between batches.

- Write-behind: when a flow is confirmed or re-pointed (and again every half idle TTL while it
  lives) the worker queues ``client -> cluster:transceiver`` with a TTL of twice the idle TTL.
- Lookup on a miss: a non-STUN packet from an unknown client may queue a lookup, limited by a
  token bucket, one in flight per client, and misses remembered for a few seconds. The packet that
  missed is dropped (counted); the flow is restored when the answer arrives, so the next packet
  of the call goes through.
- Redis down or slow: operations time out quickly, are counted as errors, and the thread
  reconnects with exponential backoff; forwarding never waits for it.

The rate limiter and the negative cache are plain objects with ``now`` passed in.

Credentials (``RedisAuth``): the password comes from the environment or a file (never a command
line, never a URL in a manifest) and is never logged: it is kept out of ``repr`` and scrubbed from
every error message before that is logged. ``rediss://`` URLs verify the server's certificate
(against ``ca_file`` when given, else the system CAs) and its name.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import redis

from relay.ratelimit import TokenBucket

log = logging.getLogger("rtcedge.relay")

MAX_QUEUED = 10_000
BATCH = 256
Request = tuple[str, Hashable, str, int]  # op ("set", "get", "stop"), flow key, Redis key, tid


def redis_key(cluster: int, client: tuple[str, int]) -> str:
    return f"rtcedge:{cluster}:flow:{client[0]}:{client[1]}"


@dataclass
class NegativeCache:
    """Clients Redis did not know, remembered for ``ttl_s`` (bounded: cleared when full)."""

    ttl_s: float
    capacity: int = 65536
    until: dict[Hashable, float] = field(default_factory=dict)

    def add(self, key: Hashable, now: float) -> None:
        if len(self.until) >= self.capacity:
            self.until.clear()
        self.until[key] = now + self.ttl_s

    def __contains__(self, key: Hashable) -> bool:
        return key in self.until

    def fresh(self, key: Hashable, now: float) -> bool:
        expiry = self.until.get(key)
        if expiry is None:
            return False
        if expiry <= now:
            del self.until[key]
            return False
        return True


@dataclass(frozen=True)
class RedisAuth:
    """How the relay authenticates to Redis (``requirepass``/ACL password) and checks its TLS
    certificate. A password in the URL, if any (a URL from a Secret), wins over ``password``."""

    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None

    def connect_kwargs(self) -> dict[str, str]:
        kwargs = {}
        if self.password:
            kwargs["password"] = self.password
        if self.ca_file:
            kwargs["ssl_ca_certs"] = self.ca_file
        return kwargs

    def scrub(self, text: str, url: str) -> str:
        """``text`` with every secret the relay holds replaced, for log lines."""
        for secret in (self.password, urlsplit(url).password):
            if secret:
                text = text.replace(secret, "***")
        return text


@dataclass
class CacheStats:
    writes: int = 0
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    errors: int = 0
    dropped: int = 0  # requests not queued (queue full) or abandoned during an outage


class RedisFlowCache:
    """The worker's side: non-blocking ``store``/``lookup``, results in ``results``."""

    def __init__(
        self,
        url: str,
        cluster: int,
        ttl_s: int,
        timeout_s: float = 0.05,
        lookups_per_s: float = 200.0,
        negative_ttl_s: float = 5.0,
        auth: RedisAuth = RedisAuth(),
    ) -> None:
        self.url = url
        self.auth = auth
        self.cluster = cluster
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.limiter = TokenBucket(lookups_per_s, lookups_per_s)
        self.negative = NegativeCache(negative_ttl_s)
        self.in_flight: set[Hashable] = set()
        self.results: deque[tuple[Hashable, int | None]] = deque()
        self.stats = CacheStats()
        self._requests: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="redis-flow-cache", daemon=True)

    def start(self) -> RedisFlowCache:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._requests.put(("stop", None, "", 0))

    # -- worker side (hot loop: never blocks) ----------------------------------------------------
    def store(self, key: Hashable, client: tuple[str, int], tid: int) -> None:
        if self._requests.qsize() >= MAX_QUEUED:
            self.stats.dropped += 1
            return
        self._requests.put(("set", key, redis_key(self.cluster, client), tid))

    def lookup(self, key: Hashable, client: tuple[str, int], now: float) -> bool:
        """Queue a lookup unless one is in flight, the client is a known miss, or over budget."""
        if key in self.in_flight or self.negative.fresh(key, now):
            return False
        if not self.limiter.allow(now) or self._requests.qsize() >= MAX_QUEUED:
            self.stats.dropped += 1
            return False
        self.in_flight.add(key)
        self._requests.put(("get", key, redis_key(self.cluster, client), 0))
        return True

    def take_results(self, now: float) -> list[tuple[Hashable, int]]:
        """Answers that arrived: (key, transceiver id) for hits; misses go to the negative cache."""
        hits = []
        while self.results:
            key, tid = self.results.popleft()
            self.in_flight.discard(key)
            if tid is None:
                self.negative.add(key, now)
            else:
                hits.append((key, tid))
        return hits

    # -- the thread --------------------------------------------------------------------------------
    def _connect(self) -> redis.Redis:
        client = redis.Redis.from_url(
            self.url,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=max(self.timeout_s, 0.2),
            health_check_interval=0,
            retry_on_timeout=False,
            # No retries inside redis-py (from 6.0 it retries connection errors, wrong passwords
            # included, with seconds of backoff): this thread backs off on its own, and a failed
            # batch must fail fast and be counted.
            retry=None,
            **self.auth.connect_kwargs(),
        )
        client.ping()  # connect now, not on the first lookup a recovering relay makes
        return client

    def _safe(self, exc: BaseException) -> str:
        return self.auth.scrub(f"{type(exc).__name__}: {exc}", self.url)

    def _run(self) -> None:
        client = None
        backoff_s = 0.1
        try:
            client = self._connect()
        except Exception as exc:  # Redis down at start: the loop below reconnects
            self.stats.errors += 1
            log.warning("redis flow cache unavailable at start (%s)", self._safe(exc))
        while not self._stop:
            batch = self._next_batch()
            if not batch:
                continue
            try:
                if client is None:
                    client = self._connect()
                replies = self._execute(client, batch)
                backoff_s = 0.1
            except Exception as exc:  # redis.RedisError, OSError...: count, back off, go on
                self._failed(batch, exc, backoff_s)
                client = None
                time.sleep(backoff_s)
                backoff_s = min(5.0, backoff_s * 2)
                continue
            self._answered(batch, replies)

    def _next_batch(self) -> list[Request]:
        """Wait for one request, then take up to BATCH without waiting (``stop`` left out)."""
        batch = [self._requests.get()]
        while len(batch) < BATCH:
            try:
                batch.append(self._requests.get_nowait())
            except queue.Empty:
                break
        return [r for r in batch if r[0] != "stop"]

    def _execute(self, client: redis.Redis, batch: list[Request]) -> list:
        """One pipelined round trip for the whole batch."""
        pipe = client.pipeline(transaction=False)
        for op, _key, name, tid in batch:
            if op == "set":
                pipe.set(name, f"{self.cluster}:{tid}", ex=self.ttl_s)
            else:
                pipe.get(name)
        return pipe.execute()

    def _failed(self, batch: list[Request], exc: Exception, backoff_s: float) -> None:
        """A batch Redis did not take: counted, and its lookups answered as misses."""
        self.stats.errors += 1
        self.stats.dropped += len(batch)
        for op, key, _name, _tid in batch:
            if op == "get":
                self.results.append((key, None))
        log.warning(
            "redis flow cache unavailable (%s); retrying in %.1fs",
            self._safe(exc),
            backoff_s,
        )

    def _answered(self, batch: list[Request], replies: list) -> None:
        """Count the writes; hand the lookups' answers to the worker (``take_results``)."""
        for (op, key, _name, _tid), reply in zip(batch, replies, strict=True):
            if op == "set":
                self.stats.writes += 1
                continue
            self.stats.lookups += 1
            tid = _parse_value(reply, self.cluster)
            if tid is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            self.results.append((key, tid))


def _parse_value(reply: bytes | None, cluster: int) -> int | None:
    if not reply:
        return None
    try:
        c, t = reply.split(b":")
        return int(t) if int(c) == cluster else None
    except ValueError:
        return None
