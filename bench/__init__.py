"""Benchmarks and the real peers (relay process, stand-in transceivers) they and the tests use."""
