"""``python -m rtcedge``: same as the ``rtcedge`` console script (e.g. from a checkout with
PYTHONPATH set, where the installed script would import another copy)."""

from rtcedge.cli import main

main()
