"""Benchmarks, and the real peers that they, ``rtcedge up`` and the tests run (relay and
transceiver processes, stand-in transceivers, Redis, a NAT) and the benchmarks' aiortc callers."""
