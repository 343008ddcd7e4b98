"""Certificates made for a test with the ``cryptography`` package: a private CA and a server
certificate for 127.0.0.1 that it signs (what a TLS client given the CA file trusts, and one
without it does not: rediss:// to redis-server, wss:// to a backend), and a self-signed one."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def self_signed(
    key: Any, common_name: str, lifetime: datetime.timedelta, ip: str | None = None
) -> x509.Certificate:
    """A certificate of ``key`` signed by itself (a CA too), valid from a few minutes ago for
    ``lifetime``; for ``ip`` when given."""
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ip is not None:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(key, hashes.SHA256())


def certificates(tmp_path: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (PEM files)."""
    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key, issuer: str, issuer_key, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    files = {
        "ca": cert("test CA", ca_key, "test CA", ca_key, True),
        "cert": cert("127.0.0.1", server_key, "test CA", ca_key, False),
    }
    out = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for name, c in files.items():
        out[name].write_bytes(c.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    out["key"].chmod(0o600)
    return out
