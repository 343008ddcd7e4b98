"""``rtcedge up --https`` (issue 27): the page and WHIP over TLS with a certificate ``up`` makes,
or the user's; on by itself when ``--http`` listens beyond loopback, where plain http gives a
browser's page no microphone. A real ``up`` and real TLS connections on loopback; the browser
over https on a LAN address: tests/transceiver/test_browser_https.py."""

from __future__ import annotations

import base64
import datetime
import glob
import hashlib
import json
import os
import pathlib
import re
import socket
import ssl
import stat
import tempfile
import urllib.error
import urllib.request

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from rtcedge.checks import UpBackend, check_up_options
from rtcedge.cli import main
from rtcedge.https import HttpsGiven
from testbed.ports import free_port
from tests.support.up import running_up
from transceiver.signaling import tls

NOW = datetime.datetime.now(datetime.UTC)


def ports() -> list[str]:
    http = free_port("127.0.0.1", socket.SOCK_STREAM)
    return ["--http", f"127.0.0.1:{http}", "--relay", f"127.0.0.1:{free_port('127.0.0.1')}"]


def served_certificate(host: str, port: int) -> bytes:
    """The DER certificate the TLS server at (host, port) presents (not verified: looked at)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def our_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "rtcedge-up-https-*")))


def test_up_serves_https_with_the_certificate_whose_fingerprints_it_prints():
    args = ports()
    host, port = args[1].rsplit(":", 1)
    before = our_dirs()
    seen: list[str] = []
    with running_up("--https", *args, seen=seen) as ready:
        assert f"open https://{args[1]}/" in ready, ready
        said = "".join(seen)
        fingerprint = re.search(r"SHA-256 fingerprint ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})", said)
        spki = re.search(r"--ignore-certificate-errors-spki-list=(\S+)", said)
        assert fingerprint and spki, said
        der = served_certificate(host, int(port))
        digest = hashlib.sha256(der).hexdigest().upper()
        assert fingerprint[1].replace(":", "") == digest
        cert = x509.load_der_x509_certificate(der)
        public = cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        assert spki[1] == base64.b64encode(hashlib.sha256(public).digest()).decode()
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
        assert cert.public_key().curve.name == "secp256r1"
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.1" in {str(a) for a in names.get_values_for_type(x509.IPAddress)}
        assert cert.not_valid_after_utc - cert.not_valid_before_utc <= datetime.timedelta(days=8)
        # The key: in a directory of up's own, only its owner can enter or read.
        (made,) = our_dirs() - before
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
        for name in ("cert.pem", "key.pem"):
            assert stat.S_IMODE(os.stat(os.path.join(made, name)).st_mode) == 0o600
        # A client that trusts that certificate alone reads the page's JSON; plain http is gone.
        pinned = ssl.create_default_context(cafile=os.path.join(made, "cert.pem"))
        with urllib.request.urlopen(f"https://{args[1]}/page.json", context=pinned) as answer:
            assert json.load(answer) == {"backend": "echo", "audio_format": "pcm16"}
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://{args[1]}/page.json", timeout=5)
    assert not os.path.exists(made), "the key outlived up"


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    """A good pair, and the ways a file can be wrong."""
    cert, key = tls.self_signed(["127.0.0.1"], NOW)
    other_cert, _ = tls.self_signed(["127.0.0.1"], NOW)
    old, old_key = tls.self_signed(["127.0.0.1"], NOW - datetime.timedelta(days=30))
    locked = serialization.load_pem_private_key(key, None).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    )
    return {
        "cert": write(tmp_path / "cert.pem", cert),
        "key": write(tmp_path / "key.pem", key),
        "other_cert": write(tmp_path / "other.pem", other_cert),
        "expired": write(tmp_path / "expired.pem", old),
        "expired_key": write(tmp_path / "expired-key.pem", old_key),
        "locked": write(tmp_path / "locked.pem", locked),
        "text": write(tmp_path / "notes.txt", b"not a certificate\n"),
        "missing": str(tmp_path / "nowhere.pem"),
    }


@pytest.mark.parametrize(
    ("cert", "key", "option", "says"),
    [
        ("missing", "key", "--https-cert", "cannot read"),
        ("text", "key", "--https-cert", "holds no PEM certificate"),
        ("expired", "expired_key", "--https-cert", "expired on"),
        ("cert", "text", "--https-key", "holds no PEM private key"),
        ("cert", "locked", "--https-key", "is encrypted"),
        ("other_cert", "key", "--https-key", "is not the key of the certificate"),
        ("cert", None, "--https-key", "--https-cert and --https-key go together"),
    ],
)
def test_a_bad_certificate_or_key_file_fails_in_one_line_naming_its_option(
    files, cert, key, option, says
):
    args = ["--https-cert", files[cert]] + (["--https-key", files[key]] if key else [])
    for group, command, env in (
        (main, ["up", *args, *ports()], {}),
        (transceiver_main(), ["serve", *args], serve_env()),
    ):
        result = CliRunner().invoke(group, command, env=env)
        assert result.exit_code == 2, result.output
        (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
        assert line.startswith(f"Error: {option}: ") and says in line, result.output
        assert "Traceback" not in result.output


def transceiver_main():
    from transceiver.cli import main as serve_main

    return serve_main


def serve_env() -> dict[str, str]:
    """What ``transceiver serve`` needs besides the TLS files (its keyring, the relay)."""
    return {
        "RTCEDGE_TRANSCEIVER_ID": "0",
        "RTCEDGE_KEYRING_JSON": json.dumps({"current": 0, "keys": {"0": "00" * 32}}),
        "RTCEDGE_ADVERTISE": "127.0.0.1:3478",
    }


def test_the_users_certificate_is_served_as_given(files):
    args = ports()
    host, port = args[1].rsplit(":", 1)
    seen: list[str] = []
    with running_up("--https-cert", files["cert"], "--https-key", files["key"], *args, seen=seen):
        der = served_certificate(host, int(port))
    given = x509.load_pem_x509_certificate(pathlib.Path(files["cert"]).read_bytes())
    assert der == given.public_bytes(serialization.Encoding.DER)
    assert not any("self-signed certificate made" in line for line in seen), seen


@pytest.mark.parametrize(
    ("http", "given", "on", "automatic"),
    [
        ("127.0.0.1:8080", HttpsGiven(), False, False),
        ("[::1]:8080", HttpsGiven(), False, False),
        ("0.0.0.0:8080", HttpsGiven(), True, True),  # every address, the LAN's too
        ("10.254.0.1:8080", HttpsGiven(), True, True),
        ("10.254.0.1:8080", HttpsGiven(https=False), False, False),
        ("127.0.0.1:8080", HttpsGiven(https=True), True, False),
    ],
)
def test_https_is_on_by_itself_beyond_loopback_unless_told_otherwise(http, given, on, automatic):
    relay = "[::1]:3478" if http.startswith("[") else "127.0.0.1:3478"
    addresses = check_up_options(http, relay, 1, UpBackend(), None, https=given)
    assert (addresses.https.on, addresses.https.automatic) == (on, automatic)
    said = addresses.https.announcement(addresses.http)
    assert (said is not None) == automatic
    if said:
        assert "beyond loopback" in said and "--no-https" in said, said


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--no-https", "--https-cert", "c.pem", "--https-key", "k.pem"], "--no-https"),
        (["--https-name", "laptop.local", "--https-cert", "c", "--https-key", "k"], "--https-name"),
        (["--no-https", "--https-name", "laptop.local"], "--https-name"),
    ],
)
def test_https_options_that_do_not_fit_together_name_the_option(args, option):
    result = CliRunner().invoke(main, ["up", *args, *ports()])
    assert result.exit_code == 2, result.output
    assert f"Error: {option}: " in result.output, result.output
