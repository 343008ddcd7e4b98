"""Target ``selftest``: proves the runner reports a finding. Crashes on inputs containing b'crash'.

Not a product target (``python -m fuzz.run all`` skips it); tests/fuzz feeds it a crashing seed.
"""

from __future__ import annotations

from fuzz.harness import main, require


def test_one_input(data: bytes) -> None:
    require(b"crash" not in data, "selftest input contains b'crash'")


if __name__ == "__main__":
    main(test_one_input)
