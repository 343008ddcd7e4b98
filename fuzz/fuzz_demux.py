"""Target ``demux``: the transceiver's demultiplexer as a plain object (transceiver.socket.demux).

``Demux.route(data, client, relay)`` with three sessions, driven by a script (fuzz.script) that
also ends and restarts sessions and lets time pass so that addresses expire. Findings: any
exception; a datagram routed to a session its client address was not proven for (model in
fuzz.script); ``learned`` on a datagram that proves nothing for that session; a drop without a
reason; a media path or a ``path_to`` answer that no check established; ``select`` (ICE's
round trip) of an address the session never learned; a removed session still reachable.
"""

from __future__ import annotations

import atheris

from fuzz.harness import main, require

with atheris.instrument_imports(include=["common", "transceiver.socket.demux"]):
    from transceiver.socket.demux import Demux

from fuzz import script  # after the modules under test: it imports common

CONFIG = script.Config(relay_networks=True)  # Demux is given relays by its caller: ours


def relay_key(addr: tuple | None) -> script.AddrKey | None:
    return script.addr_key(addr) if addr is not None else None


class Harness:
    def __init__(self, config: script.Config = CONFIG) -> None:
        del config  # the same script format as media_socket; its configuration byte is unused
        self.slots = script.make_slots()
        self.demux: Demux[object] = Demux()
        self.now = 0.0
        for slot in self.slots:
            self.register(slot)

    def register(self, slot: script.Slot) -> None:
        slot.session = object()
        self.demux.add(slot.ufrag, slot.password, slot.session)

    def run_step(self, step: script.Step) -> None:
        if step.kind == script.CONTROL:
            self.control(step)
        else:
            self.route(step)
        for slot in self.slots:
            require((slot.ufrag in self.demux) == slot.present, "membership")
            path = self.demux.path(slot.ufrag)
            if not slot.present:
                require(path is None, "a removed session still has a path")
            elif path is not None:
                client, relay = script.addr_key(path.client), relay_key(path.relay)
                allowed = script.path_allowed(CONFIG, slot, client, relay)
                require(allowed, f"session {slot.index} latched to {path} without a check")
        require(len(self.demux) == sum(s.present for s in self.slots), "len()")

    def control(self, step: script.Step) -> None:
        slot = self.slots[step.arg % len(self.slots)]
        action = (step.arg >> 2) & 3
        client = script.SOURCES[step.source][:2]
        if action == script.REMOVE:
            self.demux.remove(slot.ufrag)
            slot.present = False
        elif action == script.READD and not slot.present:
            slot.renew()
            self.register(slot)
        elif action == script.FORGET:
            # Time passes (0..75 s) and addresses left behind expire. Which ones is the
            # demultiplexer's call (it tracks what it heard); the model drops what it dropped,
            # and the checks that follow still hold it to "only proven addresses route".
            self.now += 5.0 * (step.arg >> 4)
            self.demux.expire(self.now)
            for other in self.slots:
                if other.present:
                    kept = {
                        script.addr_key(src[:2])
                        for src in script.SOURCES
                        if self.demux.path_to(other.ufrag, src[:2]) is not None
                    }
                    other.proven = {(c, r) for c, r in other.proven if c in kept}
        else:
            path = self.demux.path_to(slot.ufrag, client)
            if path is not None:
                require(slot.present, "path_to answers for a removed session")
                require(script.addr_key(path.client) == script.addr_key(client), "path_to client")
                relay = relay_key(path.relay)
                allowed = script.may_send(CONFIG, slot, script.addr_key(client), relay)
                require(allowed, f"path_to gives {path}, never authenticated")
            # ICE reports a round trip to ``client`` (it checks only addresses it may send to):
            # the demultiplexer moves the media path there, and only there.
            selected = self.demux.select(slot.ufrag, client)
            require(selected == (path is not None), "select() of an address it cannot reach")
            if selected:
                moved = self.demux.path(slot.ufrag)
                require(moved is not None and moved.client == client, "select() moved elsewhere")

    def route(self, step: script.Step) -> None:
        payload = step.body if step.kind == script.RAW else script.stun_payload(step, self.slots)
        client = script.SOURCES[step.source][:2]
        relay = script.RELAYS[step.relay] if step.relay is not None else None
        key = (script.addr_key(client), relay_key(relay))
        script.learn(self.slots, payload, key)
        result = self.demux.route(payload, client, relay)
        if result.session is None:
            require(result.reason.isidentifier(), f"drop without a reason: {result.reason!r}")
            require(not result.learned, "learned and dropped")
            return
        owners = [s for s in self.slots if s.present and s.session is result.session]
        require(len(owners) == 1, "routed to a session that is not registered")
        slot = owners[0]
        require(key[0] in slot.clients(), f"routed to session {slot.index} unproven")
        if result.learned:
            require(key in slot.proven, "learned from a datagram that proves nothing")
            way = self.demux.path_to(slot.ufrag, client)
            require(way is not None and way.relay == relay, "learned but not answerable")


def test_one_input(data: bytes) -> None:
    harness = Harness()
    for step in script.steps(data):
        harness.run_step(step)


if __name__ == "__main__":
    main(test_one_input)
