"""What the tests share: loopback clients, bounded waits, in-process servers, WHIP requests,
RFC test vectors. Test modules import helpers from here, never from one another."""
