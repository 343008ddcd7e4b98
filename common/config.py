"""What the relay's and the transceiver's configurations share: the error that names an option,
address parsing, and the hint keyring from ``--keyring FILE`` or ``--keyring-json``.

Every check raises ``ConfigError`` naming the command-line option, so a bad deployment fails at
start with a message that says what to fix.
"""

from __future__ import annotations

import ipaddress
import socket

from common.hint import Keyring


class ConfigError(ValueError):
    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


def parse_host_port(option: str, text: str) -> tuple[str, int]:
    """'127.0.0.1:3478', '[::1]:3478' or 'name:port' -> (host, port)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host:
        raise ConfigError(option, f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(
            option, f"write IPv6 addresses in brackets, e.g. [::1]:3478 (got {text!r})"
        )
    try:
        port_n = int(port)
    except ValueError:
        raise ConfigError(option, f"port must be a number, got {port!r}") from None
    if not 0 <= port_n <= 65535:
        raise ConfigError(option, f"port {port_n} out of range 0..65535")
    return host, port_n


def parse_transceiver(option: str, text: str) -> tuple[int, tuple[str, int]]:
    """'ID=HOST:PORT' -> (transceiver id, (host, port)): the relay's --transceiver, the
    transceiver's --peer-http."""
    ident, sep, addr = text.partition("=")
    if not sep:
        raise ConfigError(option, f"expected ID=HOST:PORT, got {text!r}")
    try:
        tid = int(ident)
    except ValueError:
        raise ConfigError(option, f"transceiver id must be a number, got {ident!r}") from None
    if not 0 <= tid <= 0xFFFF:
        raise ConfigError(option, f"transceiver id {tid} out of range 0..65535")
    return tid, parse_host_port(option, addr)


def check_id_template(option: str, template: str) -> tuple[str, int]:
    """A DNS template such as 'rtcedge-transceiver-{id}.rtcedge-transceiver-headless:8080' (the
    relay's --transceiver-dns, the transceiver's --peer-http-dns): it must name {id} and a port.
    Returns the (host, port) of id 0, for the caller's further checks."""
    if "{id}" not in template:
        raise ConfigError(option, "the template must contain {id}")
    return parse_host_port(option, template.replace("{id}", "0"))


def format_host_port(host: str, port: int) -> str:
    """The inverse of ``parse_host_port``: 'HOST:PORT', an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_family(option: str, host: str) -> int:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        raise ConfigError(option, f"{host!r} is not an IP address literal") from None


def load_keyring(path: str | None, inline_json: str | None) -> Keyring:
    """The keyring from ``--keyring FILE`` or ``--keyring-json``; ConfigError names the option
    and the file (a pod mounts several: which one is wrong?)."""
    try:
        if inline_json:
            return Keyring.from_json(inline_json)
        if not path:
            raise ValueError("no keyring given")
        return Keyring.load(path)
    except OSError as exc:
        raise ConfigError("--keyring", f"cannot load keyring {path}: {exc.strerror}") from exc
    except ValueError as exc:
        if inline_json:
            raise ConfigError("--keyring-json", f"cannot load keyring: {exc}") from exc
        raise ConfigError("--keyring", f"cannot load keyring {path}: {exc}") from exc
