"""The testbed: what the tests and the benchmarks run the services with, on loopback.

Real processes and sockets, no mocks: the services launched as child processes
(``processes``), a transceiver stand-in (``standin``), aiortc callers (``callers``, and many per
process in ``caller_workers``), a NAT (``nat``), an emulated network link (``linkmodel``,
``linkproxy``, ``linkprobe``), a round-robin HTTP front and a fleet behind it (``front``,
``fleet``), the example voice agent (``voice_agent``), free ports (``ports``) and what /proc
says of it all (``procfs``).

A layer of its own, below bench/ (which measures with it) and above the services it runs:
``rtcedge up`` starts its relay, transceiver and voice agent from here too.
"""
