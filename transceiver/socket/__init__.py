"""The media socket: one UDP socket per process, its datagrams drained, judged and delivered to
sessions (a relay's encapsulated TCP clients included), and sessions' replies sent back along the
path ICE proved."""
