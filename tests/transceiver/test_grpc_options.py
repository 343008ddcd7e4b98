"""``--backend grpc`` at start: its URL forms, each mistake one line naming the option; its
bearer from a file or the environment and its CA file reach the backend's configuration; grpc
itself is imported only when the backend is built."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.transceiver.test_backend_options import BASE, config, run
from transceiver.backends import create_backend
from transceiver.backends.grpc import GrpcBackendConfig

GRPC = ["--backend", "grpc", "--backend-url", "grpc://127.0.0.1:50051"]


@pytest.mark.parametrize(
    ("url", "target", "tls"),
    [
        ("grpc://127.0.0.1:50051", "127.0.0.1:50051", False),
        ("grpcs://inference.example:8443", "inference.example:8443", True),
        ("grpcs://inference.example", "inference.example:443", True),
        ("grpc://[::1]:50051/", "[::1]:50051", False),
    ],
)
def test_the_url_forms(url, target, tls):
    config = GrpcBackendConfig(url)
    assert (config.target, config.tls) == (target, tls)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--backend", "grpc"], "required with --backend grpc"),
        (["--backend", "grpc", "--backend-url", "ws://b:1/"], "grpc://HOST:PORT or grpcs://"),
        (["--backend", "grpc", "--backend-url", "grpc://b:1/call"], "no path"),
        (["--backend", "grpc", "--backend-url", "grpc://b:1?x=1"], "no path, query"),
        (["--backend", "grpc", "--backend-url", "grpc://:1"], "grpc://HOST:PORT"),
        (["--backend", "grpc", "--backend-url", "grpc://b:99999"], "not a URL"),
        ([*GRPC, "--backend-ca-file", "/etc/hostname"], "CA file is for grpcs://"),
    ],
)
def test_a_bad_grpc_url_is_one_line_naming_backend_url(args, says):
    result = run(BASE + args)
    assert result.exit_code == 2, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and "--backend-url" in error[0] and says in error[0], result.output


def test_the_rate_is_the_backends_choice():
    result = run([*BASE, *GRPC, "--audio-rate", "16000"])
    assert result.exit_code == 2 and "--audio-rate" in result.output
    assert "chooses its rate per call" in result.output


def test_the_bearer_and_the_ca_file_reach_the_backend(monkeypatch, tmp_path):
    key = tmp_path / "key"
    key.write_text("# the backend's key\nsk-grpc\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    args = ["--backend", "grpc", "--backend-url", "grpcs://b:443", "--backend-ca-file", str(ca)]
    cfg = config(monkeypatch, [*args, "--backend-key-file", str(key)])
    backend = cfg.grpc_backend_config()
    assert (backend.bearer, backend.ca_file, backend.tls) == ("sk-grpc", str(ca), True)
    assert "sk-grpc" not in repr(cfg) and "sk-grpc" not in repr(backend)
    from_env = config(monkeypatch, GRPC, {"RTCEDGE_BACKEND_KEY": "sk-env"})
    assert from_env.grpc_backend_config().bearer == "sk-env"


def test_unknown_options_are_refused():
    with pytest.raises(ValueError, match=r"unknown option.*grpc backend: nope"):
        create_backend("grpc", "grpc://b:1", nope=1)
    with pytest.raises(ValueError, match="keepalive_s must be a number > 0"):
        create_backend("grpc", "grpc://b:1", keepalive_s=0)


def test_grpc_is_imported_only_by_the_grpc_backend():
    code = (
        "import sys\n"
        "from transceiver.cli import main\n"
        "from transceiver.config import TransceiverConfig\n"
        "import transceiver.backends.grpc\n"
        "assert 'grpc' not in sys.modules and 'google.protobuf' not in sys.modules, 'eager'\n"
        "from transceiver.backends import create_backend\n"
        "create_backend('grpc', 'grpc://127.0.0.1:1')\n"
        "assert 'grpc' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
