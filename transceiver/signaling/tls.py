"""TLS on the ``--http`` listener (``--https-cert``, ``--https-key``): its server context, the
certificate's fingerprints, and a self-signed certificate for trials (``rtcedge up --https``).

Why the page needs it: a browser gives the microphone only to a secure context, and a page on
plain http is one only on loopback (``localhost``, ``127.0.0.1``, ``[::1]``): a phone on the LAN
opening ``http://192.168.1.5:8080/`` gets no ``navigator.mediaDevices`` at all. A deployment ends
TLS at its ingress; a trial off loopback ends it here.

Each file is read and parsed on its own first, so that a bad one fails at start in one line
naming its option (``ConfigError``), not in OpenSSL's words about a "PEM lib". Building the
self-signed certificate and the fingerprints is pure (``now`` is passed in): bytes in, bytes out.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.config import ConfigError

CERT_OPTION = "--https-cert"
KEY_OPTION = "--https-key"
# A trial's certificate lives as long as a trial: each `rtcedge up --https` makes a new one.
SELF_SIGNED_LIFETIME = datetime.timedelta(days=7)
SELF_SIGNED_NAME = "rtcedge up (self-signed, for trials)"


@dataclass(frozen=True)
class Fingerprints:
    """What a person or a browser checks a self-signed certificate by."""

    sha256: str  # of the certificate (DER), AB:CD:... as browsers show it
    spki_sha256_b64: str  # of its public key (SubjectPublicKeyInfo), base64: Chromium's
    # --ignore-certificate-errors-spki-list takes this


def fingerprints(cert_pem: bytes) -> Fingerprints:
    """The fingerprints of the first certificate of ``cert_pem``."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return Fingerprints(
        ":".join(digest[i : i + 2] for i in range(0, len(digest), 2)),
        base64.b64encode(hashlib.sha256(spki).digest()).decode(),
    )


def self_signed(
    hosts: Sequence[str],
    now: datetime.datetime,
    lifetime: datetime.timedelta = SELF_SIGNED_LIFETIME,
) -> tuple[bytes, bytes]:
    """(certificate PEM, unencrypted PKCS#8 key PEM) of a fresh ECDSA P-256 key, self-signed
    for ``hosts`` (addresses and DNS names, the first also its common name), valid from a few
    minutes before ``now`` (a clock a little behind) for ``lifetime``. A server certificate, not
    a CA: what a browser that is told to trust it (an exception, a pinned key) expects."""
    if not hosts:
        raise ValueError("a certificate needs at least one host")
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):  # once each, in order
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, hosts[0][:64]),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, SELF_SIGNED_NAME),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _read(option: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(option, f"cannot read {path}: {exc.strerror}") from None


def check_certificate(path: str, now: datetime.datetime) -> x509.Certificate:
    """The first certificate of the PEM file ``path`` (the server's; a chain may follow), in its
    validity; ConfigError naming --https-cert otherwise."""
    data = _read(CERT_OPTION, path)  # (its ConfigError is a ValueError: read outside the try)
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(CERT_OPTION, f"{path} holds no PEM certificate") from None
    cert = chain[0]
    if now > cert.not_valid_after_utc:
        raise ConfigError(CERT_OPTION, f"{path} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    if now < cert.not_valid_before_utc:
        raise ConfigError(
            CERT_OPTION, f"{path} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M}"
        )
    return cert


def check_key(path: str) -> None:
    """The PEM file ``path`` holds one unencrypted private key; ConfigError naming --https-key
    otherwise (a passphrase would have to be typed at every start, or stored beside it)."""
    data = _read(KEY_OPTION, path)
    try:
        serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(KEY_OPTION, f"{path} is encrypted: give an unencrypted key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(KEY_OPTION, f"{path} holds no PEM private key") from None


def server_context(cert_path: str, key_path: str, now: datetime.datetime) -> ssl.SSLContext:
    """The --http listener's TLS context from the two files; ConfigError naming the option of
    the file that is wrong (unreadable, not PEM, expired, encrypted, not the pair)."""
    check_certificate(cert_path, now)
    check_key(key_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError:
        raise ConfigError(
            KEY_OPTION, f"{key_path} is not the key of the certificate in {cert_path}"
        ) from None
    return context
