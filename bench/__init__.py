"""Benchmarks, each against a reference measured in the same run, and their plots.

What they run (the services as processes, stand-in transceivers, aiortc callers, emulated links)
is the testbed's (testbed/), which the tests and ``rtcedge up`` share.
"""
