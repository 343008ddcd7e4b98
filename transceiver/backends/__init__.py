"""Built-in backends (the interface is in ``transceiver.backend``; build one with
``create_backend``): ``echo``, embedded, and ``websocket``, a bridge to an external service."""
