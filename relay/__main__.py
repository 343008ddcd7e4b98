"""``python -m relay``: same as the ``relay`` console script."""

from relay.cli import main

main()
