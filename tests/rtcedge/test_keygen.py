"""``rtcedge keygen``: a fresh keyring, or one rotated from ``--add-to FILE``; every mistake is
one line naming the option and the file (it used to say "keyring is not JSON", not which)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from common.hint import Keyring
from rtcedge.cli import main


def keygen(*args: str):
    return CliRunner().invoke(main, ["keygen", *args], prog_name="rtcedge")


def test_a_rotated_keyring_keeps_the_old_keys_and_signs_with_the_new():
    first = keygen("--key-id", "0")
    assert first.exit_code == 0, first.output
    with CliRunner().isolated_filesystem():
        with open("ring.json", "w") as f:
            f.write(first.output)
        rotated = keygen("--add-to", "ring.json", "--key-id", "1")
    assert rotated.exit_code == 0, rotated.output
    ring = Keyring.from_json(rotated.output)
    assert sorted(ring.keys) == [0, 1] and ring.signing_key_id == 1
    assert ring.keys[0] == Keyring.from_json(first.output).keys[0]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{bad", "--add-to: bad.json: keyring is not JSON"),
        ("[]", "--add-to: bad.json: keyring JSON must be an object"),
        (json.dumps({"signing_key_id": 0, "keys": {"0": "?"}}), "--add-to: bad.json: secret of "
         "key 0 is not base64"),
        (b"\xff\xfe", "--add-to: bad.json: "),
    ],
    ids=["not-json", "not-an-object", "bad-secret", "not-utf8"],
)  # fmt: skip
def test_a_bad_keyring_file_is_one_line_naming_the_option_and_the_file(content, says):
    with CliRunner().isolated_filesystem():
        with open("bad.json", "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())
        result = keygen("--add-to", "bad.json", "--key-id", "1")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {says}"), result.output
    assert "Traceback" not in result.output


def test_a_key_id_already_in_the_file_or_out_of_range_names_key_id(tmp_path):
    ring = tmp_path / "ring.json"
    ring.write_text(Keyring.generate(3).to_json())
    taken = keygen("--add-to", str(ring), "--key-id", "3")
    assert taken.exit_code == 2
    assert f"Error: --key-id: key id 3 is already in {ring}" in taken.output
    out_of_range = keygen("--key-id", "99")
    assert out_of_range.exit_code == 2
    assert "Error: --key-id: key id 99 outside 0..15" in out_of_range.output
