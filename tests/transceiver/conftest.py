"""Every transceiver test's aiortc clients gather loopback candidates only."""

from testbed.callers import loopback_only

loopback_only()
