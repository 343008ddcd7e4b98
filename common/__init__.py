"""Shared sans-I/O codecs for rtcedge: packet classes, STUN, routing hints, encapsulation."""
