"""One call: its aiortc peer connection and states (ICE, DTLS certificate, SCTP bounds), and its
audio both ways (RTP, jitter buffer, Opus) between the caller and the backend."""
