"""``rtcedge up``'s options, checked before anything starts by the services' own configuration
objects (relay/config.py, transceiver/config.py).

A bad value used to surface from a child process, naming that process's option and its help
(``--media``, ``python -m relay serve --help``) although the user typed ``rtcedge up --http``;
here the same rules run in ``up`` and the error names ``up``'s option. Host names are resolved to
the address literal the services need (the first one the resolver gives, as a client would).

The backend options are the transceiver's own (declared on its config fields, checked by its
rules) and go on to it: choices and file names as arguments, the URL and the model server's key
by the environment. ``--agent`` stands for ``--backend realtime --backend-url`` at the example
voice agent ``up`` starts, whose address is known only once it runs: it is checked as a URL of
the same shape.

Also checked before anything starts: that ``--http``'s TCP port and ``--relay``'s UDP port are
free (another instance on the first would answer a readiness probe meant for ours; another relay
on the second would split the calls), and which address the answers advertise for a relay
listening on a wildcard (``0.0.0.0``, ``::``): a wildcard is no address a client can send to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Any

from common.config import ConfigError, format_host_port, parse_host_port
from common.options import option_fields
from relay.config import RelayConfig
from relay.portclaim import Holder, could_share_port, try_claim
from rtcedge.https import NOTHING_GIVEN, PLAIN_HTTP, HttpsGiven, UpHttps
from transceiver.call.libopus import DEFAULTS, EncoderSettings
from transceiver.config import BACKEND_KEY_ENV, TransceiverConfig, takes_credentials
from transceiver.signaling.tokens import read_secrets_file

# A service's option -> the ``up`` option its value comes from.
UP_OPTION = {
    "--listen": "--relay",
    "--listen-tcp": "--relay-tcp",
    "--internal": "--relay",
    "--advertise": "--advertise",
    "--relay-network": "--relay",
    "--media": "--http",
    "--http": "--http",
    "--workers": "--workers",
    "--transceiver": "--http",  # the relay's allowlist entry: the transceiver's media on --http
    "--backend": "--backend",
    "--backend-url": "--backend-url",
    "--backend-key-file": "--backend-key-file",
    "--audio-format": "--audio-format",
    "--audio-rate": "--audio-rate",
    "--realtime-session-file": "--realtime-session-file",
    "--token-secret-file": "--token-secret-file",
    "--admit-max-cpu": "--admit-max-cpu",
    "--admit-max-loop-lag": "--admit-max-loop-lag",
    "--https-cert": "--https-cert",
    "--https-key": "--https-key",
}
# ``--agent``'s URL while checking: the agent's own, on a port it picks, exists only once it runs.
AGENT_URL_SHAPE = "ws://127.0.0.1:9/v1/realtime?model=rtcedge-voice-agent"
BACKEND_URL_ENV = dict(option_fields(TransceiverConfig))["backend_url"].env


@dataclass(frozen=True)
class UpBackend:
    """What answers ``up``'s calls: its backend options as given (file names, not contents)."""

    backend: str = "echo"  # "realtime" with ``agent``
    url: str | None = None  # may hold a credential: the environment only, onwards
    key_file: str | None = None  # the model server's key; or RTCEDGE_BACKEND_KEY
    audio_format: str = "pcm16"
    audio_rate: str | None = None
    session_file: str | None = None  # the operator's Realtime session
    agent: bool = False  # --agent: the example voice agent, started by ``up``

    def config_fields(self) -> dict[str, Any]:
        """The transceiver config's fields from these options, through the parsers its option
        fields declare (the files read; the key from RTCEDGE_BACKEND_KEY without a file)."""
        given = {
            "backend": self.backend,
            "backend_url": AGENT_URL_SHAPE if self.agent else self.url,
            "backend_key": self.key_file,
            "audio_format": self.audio_format,
            "audio_rate": self.audio_rate,
            "realtime_session": self.session_file,
        }
        specs = dict(option_fields(TransceiverConfig))
        fields = {name: specs[name].value(value) for name, value in given.items()}
        if self.key_file is None and not self.takes_key_from_environment():
            fields["backend_key"] = None  # what the parser read from RTCEDGE_BACKEND_KEY
        return fields

    def takes_key_from_environment(self) -> bool:
        """RTCEDGE_BACKEND_KEY is for a model server, bot, gRPC backend or plugin of the user's:
        not the agent (whose key ``up`` makes), nor echo (which takes none)."""
        return takes_credentials(self.backend) and not self.agent

    def transceiver_options(
        self, url: str | None = None, key: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """The transceiver's arguments and environment for these options, at ``url`` with
        ``key`` (``--agent``'s), else the options' own URL and key."""
        args = ["--backend", self.backend, "--audio-format", self.audio_format]
        if self.audio_rate is not None:
            args += ["--audio-rate", self.audio_rate]
        if self.session_file is not None:
            args += ["--realtime-session-file", os.path.abspath(self.session_file)]
        env = {}
        url = url or self.url
        if url:  # a credential it may hold stays off every command line
            env[BACKEND_URL_ENV] = url
        if key is not None:
            env[BACKEND_KEY_ENV] = key
        elif self.key_file is not None:
            args += ["--backend-key-file", os.path.abspath(self.key_file)]
        elif self.takes_key_from_environment() and os.environ.get(BACKEND_KEY_ENV):
            env[BACKEND_KEY_ENV] = os.environ[BACKEND_KEY_ENV]  # (the child starts without it)
        return args, env


@dataclass(frozen=True)
class UpAdmission:
    """``up``'s load admission (transceiver/headroom.py): off unless given.

    A deployed transceiver refuses new calls at 85 % of a core or a loop 20 ms late, to keep
    its calls in progress whole; on a laptop running a browser, an editor and the relay, that
    gate refused the first call of the only person trying ("overloaded: event loop 21 ms late"),
    and there are no calls in progress to protect. ``--admit-max-cpu 85 --admit-max-loop-lag
    20`` tries the deployed gate locally.
    """

    max_cpu_pct: float = 0.0  # 0: off
    max_loop_lag_ms: float = 0.0  # 0: off

    def config_fields(self) -> dict[str, float]:
        return {
            "admit_max_cpu_pct": self.max_cpu_pct,
            "admit_max_loop_lag_ms": self.max_loop_lag_ms,
        }

    def transceiver_options(self) -> list[str]:
        """Passed on as arguments, whatever their source: the child starts without RTCEDGE_*."""
        return [
            "--admit-max-cpu",
            f"{self.max_cpu_pct:g}",
            "--admit-max-loop-lag",
            f"{self.max_loop_lag_ms:g}",
        ]


# Where a connected UDP socket is pointed to learn the default route's source address: a
# documentation address (RFC 5737, RFC 3849); connect() on UDP sends no packet.
ROUTE_PROBE = {socket.AF_INET: "192.0.2.1", socket.AF_INET6: "2001:db8::1"}
LOOPBACK = {socket.AF_INET: "127.0.0.1", socket.AF_INET6: "::1"}
DEFAULT_HTTP_PORT = 8080  # --http's, on the loopback of --relay's family


def resolve(option: str, text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (address literal, port); a name becomes the first address it resolves to."""
    host, port = parse_host_port(option, text)
    return resolve_host(option, host, port), port


def resolve_host(option: str, host: str, port: int = 0) -> str:
    """A host name or literal -> the first address literal it resolves to."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(option, f"cannot resolve {host!r}: {reason}") from None
    return str(infos[0][4][0])


def family(host: str) -> int:
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


def is_wildcard(host: str) -> bool:
    return ipaddress.ip_address(host).is_unspecified


def default_route_address(address_family: int) -> str | None:
    """This host's source address towards the internet (the default route's interface), or None
    without a route."""
    with socket.socket(address_family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ROUTE_PROBE[address_family], 9))
        except OSError:
            return None
        host = str(s.getsockname()[0])
    return None if is_wildcard(host) else host


def advertised_host(relay_host: str, advertise: str | None) -> tuple[str, str]:
    """The relay address the answers carry and why (for the ``ready`` line).

    ``--advertise`` if given; else the listen address; for a wildcard listen address, the
    default route's interface address, or loopback without a default route. Never a wildcard.
    """
    relay_family = family(relay_host)
    if advertise:
        host = resolve_host("--advertise", advertise)
        if is_wildcard(host):
            raise ConfigError("--advertise", f"{host} is a wildcard, no address a client can reach")
        if family(host) != relay_family:
            raise ConfigError("--advertise", f"{host} is not of --relay's family ({relay_host})")
        return host, "--advertise"
    if not is_wildcard(relay_host):
        return relay_host, "--relay"
    routed = default_route_address(relay_family)
    if routed is not None:
        return routed, "the default route's interface; --advertise HOST sets another"
    return LOOPBACK[relay_family], "no default route: loopback only; --advertise HOST sets another"


def check_port_free(option: str, address: tuple[str, int]) -> None:
    """ConfigError naming ``option`` when TCP ``address`` already has a listener.

    Binds with SO_REUSEADDR as the HTTP server does: a TIME_WAIT socket is no obstacle, a
    listener is.
    """
    with socket.socket(family(address[0]), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            raise ConfigError(
                option,
                f"{format_host_port(*address)} is in use ({exc.strerror}): another `rtcedge up` "
                "or server listens there; stop it or pick another port",
            ) from None


@dataclass(frozen=True)
class UpAddresses:
    """Where ``up`` runs the services, from its options."""

    http: tuple[str, int]  # the page, WHIP; the transceiver's media socket on the same host
    relay: tuple[str, int]  # the relay's public UDP socket (may be a wildcard)
    advertised: str  # the relay address the answers carry: never a wildcard
    advertised_why: str  # how ``advertised`` was chosen, for the ready line
    internal_host: str  # the relay's internal sockets, towards the transceiver
    relay_tcp: tuple[str, int] | None = None  # the relay's ICE-TCP listener (--relay-tcp)
    https: UpHttps = PLAIN_HTTP  # how --http is served: plain http, or https with which cert

    @property
    def page_host(self) -> str:
        """The host of the page's URL: --http's, or for a wildcard the advertised address (one
        a browser can open)."""
        return self.advertised if is_wildcard(self.http[0]) else self.http[0]

    def check_ports_free(self) -> None:
        """ConfigError naming ``--http`` or ``--relay`` when its port is taken, before anything
        starts: no ``ready`` that is not ours, and a message in ``up``'s own words (the relay
        would refuse a port another relay holds too, but naming its own options)."""
        check_port_free("--http", self.http)
        check_relay_port_free(self.relay)
        if self.relay_tcp is not None:
            check_port_free("--relay-tcp", self.relay_tcp)


def check_relay_port_free(address: tuple[str, int]) -> None:
    """ConfigError naming ``--relay`` when another relay holds the UDP port's claim
    (relay/portclaim.py) or any socket is bound to the address."""
    fam = family(address[0])
    claim = try_claim(fam, address[1])
    if isinstance(claim, Holder):
        if could_share_port(claim):
            raise ConfigError(
                "--relay",
                f"UDP port {address[1]} is served by another relay ({claim.describe()}): another "
                "`rtcedge up`? stop it or pick another port",
            )
    else:
        claim.close()
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        try:
            s.bind(address)
        except OSError as exc:
            raise ConfigError(
                "--relay",
                f"UDP {format_host_port(*address)} is in use ({exc.strerror}): stop what "
                "listens there or pick another port",
            ) from None


def try_plugin(config: TransceiverConfig) -> None:
    """A plugin's factory, called once here as the transceiver will call it (in a running event
    loop) and its backend closed: a factory that refuses the options then fails ``up`` in ``up``'s
    words, before anything starts, instead of the transceiver child after the relay started."""
    if config.backend_plugin is None:
        return

    async def build_and_close() -> None:
        await config.make_backend().close()

    asyncio.run(build_and_close())


def internal_host_for(relay_host: str, http_host: str) -> str:
    """The relay's internal sockets' address, towards the transceiver on ``http_host``.

    The relay's own address when it is one and of the transceiver's family (unchanged for a
    relay on one address); else the transceiver's host, or loopback of its family for a
    wildcard: the internal side must be of the transceiver's family, which the public side (the
    callers') need not be (a relay on ``[::1]`` in front of a transceiver on 127.0.0.1).
    """
    if not is_wildcard(relay_host) and family(relay_host) == family(http_host):
        return relay_host
    if is_wildcard(http_host):
        return LOOPBACK[family(http_host)]
    return http_host


def check_up_options(
    http: str | None,
    relay: str,
    workers: int,
    backend: UpBackend,
    token_secret_file: str | None,
    advertise: str | None = None,
    relay_tcp: int | None = None,
    admission: UpAdmission = UpAdmission(),
    encoder: EncoderSettings = DEFAULTS,
    https: HttpsGiven = NOTHING_GIVEN,
) -> UpAddresses:
    """The addresses ``up`` starts the services on; ConfigError names ``up``'s option for the
    first value either service would refuse (``encoder``: the ``--opus-*`` options, the
    transceiver's own). ``http`` None (not given): port 8080 on the loopback of ``relay``'s
    family, so ``--relay '[::1]:3478'`` alone runs on IPv6."""
    try:
        relay_address = resolve("--relay", relay)
        http_address = (LOOPBACK[family(relay_address[0])], DEFAULT_HTTP_PORT)
        if http is not None:
            http_address = resolve("--http", http)
        if relay_address[1] == 0:  # the answers tell browsers this port
            raise ConfigError("--relay", "needs a real port, not 0")
        advertised, why = advertised_host(relay_address[0], advertise)
        tcp_address = None
        if relay_tcp is not None:
            if not 0 < relay_tcp <= 65535:
                raise ConfigError("--relay-tcp", "needs a real port, 1..65535")
            tcp_address = (relay_address[0], relay_tcp)
        internal = internal_host_for(relay_address[0], http_address[0])
        served = https.choose(http_address[0])
        # Placeholders where ``up`` fills in values itself (ports it picks, its fresh keyring).
        RelayConfig(
            listen=relay_address,
            internal_host=internal,
            internal_port_base=1024,
            cluster=0,
            workers=workers,
            keyring_json="-",
            transceivers={0: (http_address[0], 1)},
            metrics=None,
            listen_tcp=tcp_address,
        ).validate()
        transceiver = TransceiverConfig(
            transceiver_id=0,
            cluster=0,
            media=(http_address[0], 0),
            advertise=(advertised, relay_address[1]),
            http=http_address,
            keyring_json="-",
            **backend.config_fields(),
            **admission.config_fields(),
            token_secrets=read_secrets_file(token_secret_file) if token_secret_file else (),
            relay_networks=(internal,),
            **served.config_fields(),
            **{f"opus_{name}": value for name, value in encoder.as_dict().items()},
        ).validate()
        try_plugin(transceiver)
    except ConfigError as exc:
        message = str(exc).removeprefix(f"{exc.option}: ")
        raise ConfigError(UP_OPTION.get(exc.option, exc.option), message) from None
    return UpAddresses(http_address, relay_address, advertised, why, internal, tcp_address, served)
