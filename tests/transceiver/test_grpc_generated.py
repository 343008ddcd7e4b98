"""The generated Python of the grpc backend's protocol (transceiver/backends/grpc/v1/) is checked
in, and is exactly what grpcio-tools (the version the grpc-dev extra pins) makes of backend.proto:
regenerated here into a temporary directory and compared, so a .proto edited without
regenerating, or a generated file edited by hand, fails. To regenerate, from the repository's
root: ``python3 -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=.
transceiver/backends/grpc/v1/backend.proto`` (docs/backend-protocol.md, "Generated code")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools", reason="the grpc-dev extra: pip install -e '.[grpc-dev]'")

ROOT = Path(__file__).resolve().parents[2]
PROTO = Path("transceiver/backends/grpc/v1/backend.proto")
GENERATED = ("backend_pb2.py", "backend_pb2.pyi", "backend_pb2_grpc.py")


def test_the_checked_in_generated_code_is_what_the_proto_makes(tmp_path: Path) -> None:
    (tmp_path / PROTO).parent.mkdir(parents=True)
    shutil.copy(ROOT / PROTO, tmp_path / PROTO)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--pyi_out=.",
         "--grpc_python_out=.", str(PROTO)],
        cwd=tmp_path, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for name in GENERATED:
        made = (tmp_path / PROTO.parent / name).read_text()
        checked_in = (ROOT / PROTO.parent / name).read_text()
        assert made == checked_in, f"{PROTO.parent / name} is stale: regenerate it (see above)"


def test_the_generated_code_names_the_versioned_package() -> None:
    from transceiver.backends.grpc.v1 import backend_pb2

    assert backend_pb2.DESCRIPTOR.package == "rtcedge.backend.v1"
    assert backend_pb2.DESCRIPTOR.services_by_name["Backend"].methods_by_name["Call"].full_name == (
        "rtcedge.backend.v1.Backend.Call"
    )
