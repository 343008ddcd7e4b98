"""WHIP signaling over HTTP: the handlers and their listeners, who a client is and its quotas,
the offer's checks, WHIP tokens, and requests passed on to the fellow transceiver that owns a
session."""
