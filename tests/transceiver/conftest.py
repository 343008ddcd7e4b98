"""Every transceiver test's aiortc clients gather loopback candidates only."""

from bench.webrtc_client import loopback_only

loopback_only()
