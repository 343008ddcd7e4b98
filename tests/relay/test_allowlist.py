"""The transceiver allowlist: static entries, DNS templates, and what a failed lookup keeps."""

from __future__ import annotations

from pathlib import Path

from relay.allowlist import AllowlistResolver
from testbed.ports import free_port
from testbed.processes import RelayProcess
from testbed.standin import StandInTransceiver, hint_request
from tests.support.loopback import collect, udp_client
from tests.support.relay_config import relay_config as config


def test_template_expands_over_ids_and_static_entries_win():
    cfg = config(
        transceivers={1: ("10.9.9.9", 7000)},
        transceiver_dns="t-{id}.svc:5000",
        transceiver_ids=(0, 1, 2),
    )
    assert AllowlistResolver(cfg).candidates() == {
        0: ("t-0.svc", 5000),
        1: ("10.9.9.9", 7000),
        2: ("t-2.svc", 5000),
    }


def test_failed_lookup_keeps_the_last_known_address_and_counts():
    answers = {"t-0.svc": "10.0.0.1"}

    def resolver(host: str, port: int, family: int) -> str:
        if host not in answers:
            raise OSError("NXDOMAIN")
        return answers[host]

    r = AllowlistResolver(
        config(transceiver_dns="t-{id}.svc:5000", transceiver_ids=(0, 1)), resolver=resolver
    )
    assert r.refresh(0.0) == {0: ("10.0.0.1", 5000)} and r.errors == 1
    answers["t-0.svc"] = "10.0.0.2"  # the pod moved
    answers["t-1.svc"] = "10.0.0.3"
    assert r.refresh(10.0) == {0: ("10.0.0.2", 5000), 1: ("10.0.0.3", 5000)}
    del answers["t-0.svc"]  # transient DNS failure
    assert r.refresh(20.0)[0] == ("10.0.0.2", 5000) and r.errors == 2


def test_relay_routes_through_a_dns_template_and_pins_its_workers():
    port = free_port("127.0.0.2")
    peers = [StandInTransceiver(tid, f"127.0.0.{tid}", port=port).start() for tid in (2, 3)]
    relay = RelayProcess(
        {},
        workers=2,
        extra_args=["--transceiver-dns", f"127.0.0.{{id}}:{port}", "--transceiver-ids", "2-3"],
    )
    try:
        with relay:
            assert relay.metric("rtcedge_relay_allowlist_transceivers") == 2
            clients = [udp_client() for _ in range(10)]
            for i, c in enumerate(clients):
                c.sendto(hint_request(relay.keyring, relay.cluster, 2 + i % 2)[0], relay.address)
            assert all(len(v) == 1 for v in collect(clients, 10).values())
            for c in clients:
                c.sendto(b"\x80hi", relay.address)
            echoes = collect(clients, 10)
            assert [echoes[c] for c in clients] == [
                [b"T%d:\x80hi" % (2 + i % 2)] for i in range(10)
            ]
            cpus = {
                Path(f"/proc/{pid}/status").read_text().split("Cpus_allowed_list:")[1].split()[0]
                for pid in relay.worker_pids()
            }
            assert all("-" not in c and "," not in c for c in cpus), "each worker on one CPU"
    finally:
        for p in peers:
            p.close()
