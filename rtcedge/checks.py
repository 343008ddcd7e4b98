"""``rtcedge up``'s options, checked before anything starts by the services' own configuration
objects (relay/config.py, transceiver/config.py).

A bad value used to surface from a child process, naming that process's option and its help
(``--media``, ``python -m relay serve --help``) although the user typed ``rtcedge up --http``;
here the same rules run in ``up`` and the error names ``up``'s option. Host names are resolved to
the address literal the services need (the first one the resolver gives, as a client would).
"""

from __future__ import annotations

import socket

from common.config import ConfigError, parse_host_port
from relay.config import RelayConfig
from transceiver.config import TransceiverConfig
from transceiver.tokens import read_secrets_file

# A service's option -> the ``up`` option its value comes from.
UP_OPTION = {
    "--listen": "--relay",
    "--internal": "--relay",
    "--advertise": "--relay",
    "--relay-network": "--relay",
    "--media": "--http",
    "--http": "--http",
    "--workers": "--workers",
    "--backend": "--backend",
    "--backend-url": "--backend-url",
    "--token-secret-file": "--token-secret-file",
}


def resolve(option: str, text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (address literal, port); a name becomes the first address it resolves to."""
    host, port = parse_host_port(option, text)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(option, f"cannot resolve {host!r}: {reason}") from None
    return str(infos[0][4][0]), port


def check_up_options(
    http: str,
    relay: str,
    workers: int,
    backend: str,
    backend_url: str | None,
    token_secret_file: str | None,
) -> tuple[tuple[str, int], tuple[str, int]]:
    """The ``--http`` and ``--relay`` addresses ``up`` starts the services on; ConfigError names
    ``up``'s option for the first value either service would refuse."""
    try:
        http_address = resolve("--http", http)
        relay_address = resolve("--relay", relay)
        # Placeholders where ``up`` fills in values itself (ports it picks, its fresh keyring).
        RelayConfig(
            listen=relay_address,
            internal_host=relay_address[0],
            internal_port_base=1024,
            cluster=0,
            workers=workers,
            keyring_json="-",
            transceivers={0: (http_address[0], 1)},
            metrics=None,
        ).validate()
        TransceiverConfig(
            transceiver_id=0,
            cluster=0,
            media=(http_address[0], 0),
            advertise=relay_address,
            http=http_address,
            keyring_json="-",
            backend=backend,
            backend_url=backend_url,
            token_secrets=read_secrets_file(token_secret_file) if token_secret_file else (),
            relay_networks=(relay_address[0],),
        ).validate()
    except ConfigError as exc:
        message = str(exc).removeprefix(f"{exc.option}: ")
        raise ConfigError(UP_OPTION.get(exc.option, exc.option), message) from None
    return http_address, relay_address
