"""Keys and clocks shared by the harnesses and the seed generator (no project imports here)."""

STUN_KEY = b"fuzz-password-0123456789"
"""The ICE password the stun and aioice targets key MESSAGE-INTEGRITY with."""

HINT_SECRETS = {0: bytes(range(32)), 7: bytes(range(100, 132)), 15: b"fuzz-hint-key-15" * 2}
HINT_T0_S = 1_750_000_000.0
"""The clock the hint seeds are signed at; the hint target verifies around it."""
