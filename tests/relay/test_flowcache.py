"""The Redis flow cache on its own, without a relay: the worker's side (never blocks, one lookup in
flight per client, a lookup budget, misses remembered, bounded queue) with no thread running, and
the thread against a real ``redis-server`` (write-behind, hits, misses, another cluster's value,
an outage answered as misses, reconnection). Through a whole relay: test_redis_recovery.py and
test_redis_auth.py."""

from __future__ import annotations

import pytest
import redis

from relay import flowcache
from relay.flowcache import RedisAuth, RedisFlowCache, _parse_value, redis_key
from testbed.processes import RedisServer
from tests.support.waits import wait_for

CLIENT = ("203.0.113.7", 5000)
OTHER = ("203.0.113.8", 5000)


def idle_cache(**kw: object) -> RedisFlowCache:
    """The worker's side only: requests queue up, nothing talks to Redis."""
    return RedisFlowCache("redis://127.0.0.1:1/0", cluster=3, ttl_s=90, **kw)  # type: ignore[arg-type]


def queued(cache: RedisFlowCache) -> list[tuple[str, object, str, int]]:
    return [cache._requests.get_nowait() for _ in range(cache._requests.qsize())]


# ---- the worker's side: plain logic, time passed in ----


def test_a_store_queues_the_clients_key_and_transceiver():
    cache = idle_cache()
    cache.store("k", CLIENT, 7)
    assert queued(cache) == [("set", "k", "rtcedge:3:flow:203.0.113.7:5000", 7)]
    assert redis_key(3, CLIENT) == "rtcedge:3:flow:203.0.113.7:5000"


def test_one_lookup_in_flight_per_client():
    cache = idle_cache()
    assert cache.lookup("k", CLIENT, now=0.0)
    assert not cache.lookup("k", CLIENT, now=0.1), "already asked"
    assert cache.lookup("j", OTHER, now=0.1)
    assert [r[:2] for r in queued(cache)] == [("get", "k"), ("get", "j")]
    assert cache.stats.dropped == 0, "a lookup already in flight is not a dropped request"


def test_lookups_are_limited_by_a_token_bucket_of_the_rate():
    cache = idle_cache(lookups_per_s=2)
    assert [cache.lookup(n, CLIENT, now=0.0) for n in range(4)] == [True, True, False, False]
    assert cache.stats.dropped == 2, "refused lookups are counted"
    assert cache.lookup(4, CLIENT, now=0.5), "one more token half a second later"
    assert not cache.lookup(5, CLIENT, now=0.5)
    assert [cache.lookup(n, CLIENT, now=10.0) for n in range(6, 9)] == [True, True, False]


def test_answers_free_the_client_and_a_miss_is_not_asked_again_for_a_while():
    cache = idle_cache(negative_ttl_s=5.0)
    cache.lookup("hit", CLIENT, now=0.0)
    cache.lookup("miss", OTHER, now=0.0)
    cache.results.extend([("hit", 7), ("miss", None)])
    assert cache.take_results(now=1.0) == [("hit", 7)]
    assert cache.in_flight == set()
    assert cache.lookup("hit", CLIENT, now=1.0), "a hit is not remembered: the flow is restored"
    assert not cache.lookup("miss", OTHER, now=5.9), "Redis did not know it 5 s ago"
    assert cache.stats.dropped == 0
    assert cache.lookup("miss", OTHER, now=6.0), "asked again once the miss expired"


def test_a_full_queue_drops_and_counts_requests(monkeypatch):
    monkeypatch.setattr(flowcache, "MAX_QUEUED", 2)
    cache = idle_cache()
    cache.store("a", CLIENT, 1)
    cache.lookup("b", OTHER, now=0.0)
    cache.store("c", CLIENT, 1)
    assert not cache.lookup("d", OTHER, now=0.0)
    assert cache.stats.dropped == 2 and cache._requests.qsize() == 2
    assert "d" not in cache.in_flight, "a dropped lookup can be asked again"


def test_a_value_names_a_transceiver_only_of_this_cluster():
    assert _parse_value(b"3:7", 3) == 7
    assert _parse_value(b"4:7", 3) is None, "another cluster's flow"
    for garbage in (None, b"", b"7", b"3:7:1", b"x:7", b"3:"):
        assert _parse_value(garbage, 3) is None, garbage


def test_credentials_go_to_redis_as_its_client_expects_them():
    assert RedisAuth().connect_kwargs() == {}
    auth = RedisAuth(password="pw", ca_file="/ca.pem")
    assert auth.connect_kwargs() == {"password": "pw", "ssl_ca_certs": "/ca.pem"}


# ---- the thread, against a real redis-server ----


@pytest.fixture
def rds():
    with RedisServer() as server:
        yield server


def started(url: str, **kw: object) -> RedisFlowCache:
    return RedisFlowCache(url, cluster=3, ttl_s=90, timeout_s=0.2, **kw).start()  # type: ignore[arg-type]


def answers(cache: RedisFlowCache, want: int) -> list:
    """The lookups' answers as the worker takes them, once ``want`` of them arrived."""
    assert wait_for(lambda: len(cache.results) >= want, True)
    return list(cache.results)


def test_writes_behind_with_a_ttl_and_looks_up_hits_and_misses(rds):
    store = redis.Redis.from_url(rds.url)
    store.set(redis_key(3, ("198.51.100.9", 9)), "4:2")  # written by a relay of cluster 4
    cache = started(rds.url)
    try:
        cache.store("k", CLIENT, 7)
        assert wait_for(lambda: cache.stats.writes, 1)
        assert store.get(redis_key(3, CLIENT)) == b"3:7"
        assert 0 < store.ttl(redis_key(3, CLIENT)) <= 90
        cache.lookup("k", CLIENT, now=0.0)
        cache.lookup("j", OTHER, now=0.0)
        cache.lookup("x", ("198.51.100.9", 9), now=0.0)
        assert sorted(answers(cache, 3), key=str) == [("j", None), ("k", 7), ("x", None)]
        assert (cache.stats.hits, cache.stats.misses, cache.stats.errors) == (1, 2, 0)
        assert cache.take_results(now=0.0) == [("k", 7)]
    finally:
        cache.stop()


def test_redis_down_answers_lookups_as_misses_and_reconnects_once_it_is_back():
    rds = RedisServer()  # not started yet: nothing listens on its port
    cache = started(rds.url)
    try:
        cache.lookup("k", CLIENT, now=0.0)
        assert answers(cache, 1) == [("k", None)], "a miss: the worker never waits for Redis"
        assert cache.stats.errors >= 1 and cache.stats.dropped >= 1
        with rds:
            store = redis.Redis.from_url(rds.url)

            def written() -> bool:
                cache.store("k", CLIENT, 7)  # the thread retries when a request comes
                return store.get(redis_key(3, CLIENT)) == b"3:7"

            assert wait_for(written, True, timeout_s=10), "reconnected after the outage"
    finally:
        cache.stop()


def test_a_password_in_the_url_wins_over_the_configured_one(rds):
    admin = redis.Redis.from_url(rds.url)
    admin.config_set("requirepass", "url-secret")
    store = redis.Redis.from_url(rds.url, password="url-secret")
    url = f"redis://:url-secret@{rds.host}:{rds.port}/0"
    cache = started(url, auth=RedisAuth(password="stale-secret"))
    try:
        cache.store("k", CLIENT, 7)
        assert wait_for(lambda: store.get(redis_key(3, CLIENT)), b"3:7")
        assert cache.stats.errors == 0
    finally:
        cache.stop()
