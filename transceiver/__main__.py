"""``python -m transceiver``: same as the ``transceiver`` console script."""

from transceiver.cli import main

main()
