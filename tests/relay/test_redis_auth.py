"""A Redis flow cache that wants a password (``requirepass``) or TLS: the relay authenticates with
a password it read from a file or the environment, never logs it, and with a wrong one it only
counts errors and keeps forwarding. Real ``redis-server`` and relay processes on loopback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from common.config import ConfigError
from relay.cli import build_config
from relay.cli import main as relay_main
from relay.config import redis_password
from relay.flowcache import RedisAuth
from testbed.processes import RedisServer, RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.certificates import certificates
from tests.support.loopback import collect, udp_client
from tests.support.waits import wait_for

PASSWORD = "correct-horse-7f3a9c"
WRONG = "wrong-battery-41d2e8"


class AuthRedisServer(RedisServer):
    """``redis-server`` with ``requirepass`` (and TLS when ``tls`` is given), its secrets on
    stdin (``redis-server -``), never on its command line."""

    def __init__(self, password: str, tls: dict[str, Path] | None = None) -> None:
        super().__init__()
        self.password = password
        self.tls = tls

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> AuthRedisServer:
        config = f"requirepass {self.password}\n"
        args = ["--bind", self.host, "--port", str(self.port)]
        if self.tls:
            args = ["--bind", self.host, "--port", "0", "--tls-port", str(self.port)]
            config += (
                f"tls-cert-file {self.tls['cert']}\ntls-key-file {self.tls['key']}\n"
                f"tls-ca-cert-file {self.tls['ca']}\ntls-auth-clients no\n"
            )
        self.proc = subprocess.Popen(
            ["redis-server", "-", *args, "--save", "", "--appendonly", "no"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(config.encode())
        self.proc.stdin.close()
        ok = wait_for(self._answers, True, timeout_s=timeout_s)
        assert ok, "redis-server did not start"
        return self

    def client(self) -> redis.Redis:
        extra = {"ssl_ca_certs": str(self.tls["ca"])} if self.tls else {}
        return redis.Redis.from_url(self.url, password=self.password, retry=None, **extra)

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False


def started_relay(peer: StandInTransceiver, *args: str) -> RelayProcess:
    return RelayProcess({2: peer.address}, workers=1, pin=False, extra_args=list(args))


def call_through(relay: RelayProcess, clients: int = 5) -> list:
    """Clients each open a flow (a hinted check) and send media; returns them once echoed."""
    socks = [udp_client() for _ in range(clients)]
    for c in socks:
        c.sendto(hint_request(relay.keyring, relay.cluster, 2)[0], relay.address)
    assert all(len(v) == 1 for v in collect(socks, clients).values())
    for i, c in enumerate(socks):
        c.sendto(b"\x80media %d" % i, relay.address)
    assert sum(map(len, collect(socks, clients).values())) == clients, "forwarding goes on"
    return socks


def logs_of(relay: RelayProcess) -> str:
    relay.stop()
    assert relay.proc is not None and relay.proc.stderr is not None
    return relay.proc.stderr.read().decode(errors="replace")


def test_relay_authenticates_with_a_password_file_and_never_shows_it(tmp_path: Path):
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD + "\n")  # as `echo` writes it
    secret.chmod(0o600)
    with (
        AuthRedisServer(PASSWORD) as rds,
        StandInTransceiver(2) as peer,
        started_relay(peer, "--redis-url", rds.url, "--redis-password-file", str(secret)) as relay,
    ):
        call_through(relay)
        store = rds.client()
        assert wait_for(lambda: len(store.keys(f"rtcedge:{relay.cluster}:flow:*")), 5)
        assert relay.metric("rtcedge_relay_redis_operations_total", result="error") == 0
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in relay.worker_pids()]
        metrics = relay.http("/metrics")[1]
        logs = logs_of(relay)
    for shown in (*cmdlines, metrics.encode(), logs.encode()):
        assert PASSWORD.encode() not in shown


def test_a_wrong_password_only_counts_errors_and_is_never_logged(tmp_path: Path):
    secret = tmp_path / "redis-password"
    secret.write_text(WRONG)
    with (
        AuthRedisServer(PASSWORD) as rds,
        StandInTransceiver(2) as peer,
        started_relay(peer, "--redis-url", rds.url, "--redis-password-file", str(secret)) as relay,
    ):
        call_through(relay)
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_redis_operations_total", result="error") > 0, True
        )
        call_through(relay)  # still forwarding while Redis refuses it
        assert rds.client().keys("*") == []
        logs = logs_of(relay)
    assert "redis flow cache unavailable" in logs  # the failure is reported...
    assert WRONG not in logs and PASSWORD not in logs  # ...without the secret


def test_without_the_password_a_protected_redis_is_an_outage_not_a_failure():
    """What today's main does with a requirepass Redis: no way to authenticate, errors counted."""
    with (
        AuthRedisServer(PASSWORD) as rds,
        StandInTransceiver(2) as peer,
        started_relay(peer, "--redis-url", rds.url) as relay,
    ):
        call_through(relay)
        assert wait_for(
            lambda: relay.metric("rtcedge_relay_redis_operations_total", result="error") > 0, True
        )
        assert rds.client().keys("*") == []


# ---- TLS (rediss://): Debian's redis-server is built with TLS ----


def test_rediss_with_a_private_ca_and_a_password(tmp_path: Path, monkeypatch):
    tls = certificates(tmp_path)
    secret = tmp_path / "redis-password"
    secret.write_text(PASSWORD)
    with AuthRedisServer(PASSWORD, tls) as rds, StandInTransceiver(2) as peer:
        args = ["--redis-url", rds.url, "--redis-password-file", str(secret)]
        with started_relay(peer, *args, "--redis-ca-file", str(tls["ca"])) as relay:
            call_through(relay)
            store = rds.client()
            assert wait_for(lambda: len(store.keys(f"rtcedge:{relay.cluster}:flow:*")), 5)
            assert relay.metric("rtcedge_relay_redis_operations_total", result="error") == 0
        store.flushall()
        # Without the CA the server's certificate is not trusted: errors, forwarding goes on.
        with started_relay(peer, *args) as relay:
            call_through(relay)
            assert wait_for(
                lambda: relay.metric("rtcedge_relay_redis_operations_total", result="error") > 0,
                True,
            )
            assert store.keys("*") == []


# ---- where the password may come from (units) ----


def test_password_from_the_environment_or_a_file_never_both(tmp_path: Path):
    assert redis_password(None, {}) is None
    assert redis_password(None, {"RTCEDGE_REDIS_PASSWORD": PASSWORD}) == PASSWORD
    f = tmp_path / "pw"
    f.write_text(PASSWORD + "\r\n")
    assert redis_password(str(f), {}) == PASSWORD
    with pytest.raises(ConfigError, match=r"--redis-password-file.*not both"):
        redis_password(str(f), {"RTCEDGE_REDIS_PASSWORD": PASSWORD})
    f.write_text("\n")
    with pytest.raises(ConfigError, match=r"--redis-password-file.*empty"):
        redis_password(str(f), {})
    with pytest.raises(ConfigError, match=r"--redis-password-file.*cannot read"):
        redis_password(str(tmp_path / "missing"), {})


def test_the_password_stays_out_of_reprs_and_log_lines():
    auth = RedisAuth(password=PASSWORD)
    assert PASSWORD not in repr(auth)
    line = auth.scrub(f"AuthenticationError: bad {PASSWORD} and url-pw", "redis://:url-pw@h:1/0")
    assert line == "AuthenticationError: bad *** and ***"


def test_cli_reads_the_password_from_the_environment_and_refuses_a_ca_without_tls(monkeypatch):
    routing = ["--transceiver", "0=127.0.0.1:5000", "--metrics", "off"]
    base = ["--keyring-json", "{}", *routing]  # parsed only: the CLI refuses a secret in argv
    serve = relay_main.commands["serve"]
    monkeypatch.setenv("RTCEDGE_REDIS_PASSWORD", PASSWORD)
    ctx = serve.make_context("serve", [*base, "--redis-url", "rediss://r:6380/0"])
    config = build_config(ctx.params)
    assert config.redis_auth.password == PASSWORD
    assert PASSWORD not in repr(config)
    result = CliRunner().invoke(
        relay_main,
        ["serve", *routing, "--redis-url", "redis://r:6379/0", "--redis-ca-file", "/ca.pem"],
        env={"RTCEDGE_REDIS_PASSWORD": PASSWORD, "RTCEDGE_KEYRING_JSON": "{}"},
    )
    assert result.exit_code == 2 and "--redis-ca-file" in result.output
