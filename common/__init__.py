"""What the relay and the transceiver share: the sans-I/O wire codecs (packet classes, STUN,
routing hints, encapsulation), configuration parsing, command-line options and socket setup.
The bottom layer: imports nothing of ours but ``common``."""
