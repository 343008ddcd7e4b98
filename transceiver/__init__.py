"""The transceiver: the only owner of WebRTC state (ICE, DTLS, SRTP) behind the relay."""
