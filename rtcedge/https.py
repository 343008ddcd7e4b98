"""``rtcedge up``'s https: whether the page is served over TLS, with which certificate, and the
files and lines that go with a certificate ``up`` makes.

A browser gives a page the microphone only in a secure context: https, or http on loopback. So
``up`` serves https when told (``--https``, or ``--https-cert FILE --https-key FILE``) and, unless
told not to (``--no-https``), whenever ``--http`` listens beyond loopback (a wildcard, a LAN
address), where plain http would load a page that cannot hear anyone; it says so at start.
Its own certificate is self-signed (ECDSA P-256, ``transceiver.signaling.tls``), for the page's
address and the names given (``--https-name``), valid for a week; its key exists only in a
private directory (mode 0700, the files 0600) that ``up`` deletes when it stops, and reaches the
transceiver as a file name, never on a command line. ``up`` prints the certificate's SHA-256
fingerprint (what a person compares before accepting the browser's warning) and its public
key's hash (what Chromium's ``--ignore-certificate-errors-spki-list`` takes).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from common.config import ConfigError, format_host_port
from transceiver.signaling import tls

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")  # the same machine's browser, by any of these


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(host).is_loopback


@dataclass(frozen=True)
class UpHttps:
    """How ``up`` serves ``--http``: plain http, a certificate it makes, or the user's files."""

    on: bool = False
    cert_file: str | None = None  # the user's (--https-cert); None with ``on``: up makes one
    key_file: str | None = None
    names: tuple[str, ...] = ()  # --https-name: more names for a certificate up makes
    automatic: bool = False  # on because --http listens beyond loopback, not because told

    @property
    def self_signed(self) -> bool:
        return self.on and self.cert_file is None

    def config_fields(self) -> dict[str, str | None]:
        """The transceiver config's fields: the user's files, checked as it checks them."""
        return {"https_cert": self.cert_file, "https_key": self.key_file}

    def announcement(self, http: tuple[str, int]) -> str | None:
        """The line ``up`` prints at start when it chose https by itself."""
        if not self.automatic:
            return None
        return (
            f"rtcedge up: --http {format_host_port(*http)} listens beyond loopback, where a "
            "browser gives a page the microphone only over https: serving https with a "
            "self-signed certificate (--no-https for plain http)"
        )


PLAIN_HTTP = UpHttps()


@dataclass(frozen=True)
class HttpsGiven:
    """``up``'s https options as given (``https`` None: neither --https nor --no-https)."""

    https: bool | None = None
    cert_file: str | None = None
    key_file: str | None = None
    names: tuple[str, ...] = ()

    def choose(self, http_host: str) -> UpHttps:
        """How ``up`` serves ``--http`` on ``http_host`` (an address literal); ConfigError
        naming the option that does not fit."""
        files = bool(self.cert_file or self.key_file)
        if self.https is False and files:
            raise ConfigError("--no-https", "not with --https-cert/--https-key, which serve https")
        if self.names and files:
            raise ConfigError("--https-name", "for the certificate up makes, not --https-cert's")
        if self.https is False and self.names:
            raise ConfigError("--https-name", "for the certificate up makes with --https")
        if files:
            return UpHttps(True, self.cert_file, self.key_file)
        if self.https is None:
            automatic = not is_loopback(http_host)
            return UpHttps(on=automatic, names=self.names, automatic=automatic)
        return UpHttps(on=self.https, names=self.names)


NOTHING_GIVEN = HttpsGiven()


def certificate_hosts(page_host: str, http_host: str, names: Sequence[str]) -> list[str]:
    """What a certificate up makes is for: the page's address first (its common name), the
    listen address, the names given, and this machine's own names for a local browser."""
    hosts = [page_host]
    if not ipaddress.ip_address(http_host).is_unspecified:
        hosts.append(http_host)
    return list(dict.fromkeys([*hosts, *names, *LOCAL_NAMES]))


@dataclass(frozen=True)
class MadeCertificate:
    """A certificate ``up`` made and wrote: its files, hosts and fingerprints."""

    cert_file: str
    key_file: str
    hosts: tuple[str, ...]
    fingerprints: tls.Fingerprints
    not_after: datetime.datetime

    def lines(self) -> list[str]:
        """What ``up`` prints about it before ``ready``."""
        return [
            f"rtcedge up: https with a self-signed certificate made for this run, for "
            f"{', '.join(self.hosts)}, valid until {self.not_after:%Y-%m-%d %H:%M} UTC; "
            f"SHA-256 fingerprint {self.fingerprints.sha256}",
            "rtcedge up: the browser warns about it: compare the fingerprint it shows with this "
            "one, then proceed; or start Chromium with "
            f"--ignore-certificate-errors-spki-list={self.fingerprints.spki_sha256_b64}",
        ]


def _write_private(path: str, data: bytes) -> None:
    """``data`` in a new file only its owner can read (created so: no moment of a wider mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


@contextmanager
def made_certificate(
    hosts: Sequence[str], now: datetime.datetime | None = None
) -> Iterator[MadeCertificate]:
    """A fresh self-signed certificate for ``hosts`` in a private directory, deleted (the key
    with it) when the block ends."""
    now = now or datetime.datetime.now(datetime.UTC)
    cert_pem, key_pem = tls.self_signed(hosts, now)
    directory = tempfile.mkdtemp(prefix="rtcedge-up-https-")  # mode 0700
    try:
        cert_file = os.path.join(directory, "cert.pem")
        key_file = os.path.join(directory, "key.pem")
        _write_private(key_file, key_pem)
        _write_private(cert_file, cert_pem)
        yield MadeCertificate(
            cert_file,
            key_file,
            tuple(hosts),
            tls.fingerprints(cert_pem),
            now + tls.SELF_SIGNED_LIFETIME,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
