"""The relay: a thin, pinned, SO_REUSEPORT UDP forwarder that routes each flow by its ICE hint."""
