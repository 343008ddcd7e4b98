"""Relay benchmark: packets/s, CPU per packet and added latency of one relay worker, measured
against reference forwarders in the same run.

``rtcedge bench relay`` checks the relay's two acceptance criteria:

- one relay worker costs at most 0.7x the CPU per packet of the plain Python forwarder
  (`bench/plain_forwarder.py`) and of nginx's stream UDP proxy when present, full relay logic on;
- the relay's added latency p50 at a moderate fixed rate is within 20 us of the plain forwarder's.

And one of relay tiers (issue 11): a relay forwarding to another relay (variant ``route``: an
edge relay whose flows go by ``--route`` to a stand-in of another cluster's relay ingress, which
answers the set-up like a transceiver) costs at most 1.1x the CPU per packet of one forwarding
to a transceiver (variant ``relay``). ``--tiers-only`` measures just these two.

Method. All traffic is on 127.0.0.1. The relay runs as ``relay serve`` with one worker pinned to
the first allowed CPU; every reference forwarder is pinned to that same CPU, and this process (the
generator) and the relay's supervisor to the other one. Client flows (one socket each) first
complete the STUN + hint step through the relay, so the relay forwards them as confirmed flows.
The generator then offers more than any forwarder can take: per socket one sendmmsg of a batch of
RTP-like datagrams, round robin over the sockets. Forwarders send to a sink that is never read
and has a minimal receive buffer, so it costs no CPU and counts every datagram in /proc/net/udp
(drops + queued). Each variant gets a window per round, the variants interleaved, the order
rotated every round; a window counts only if the forwarder was saturated (CPU time >= 90 % of the
wall time). CPU time comes from /proc/<pid>/schedstat of the forwarding process (relay: its
workers), packets from the sink; the relay's own packet counter is recorded as a cross-check.

Latency: one flow, sequential pings at a fixed rate; this process sends a sequence-numbered
datagram through a forwarder to a socket it reads itself and records the one-way delay with
perf_counter_ns (same host, same clock); "added" latency is a forwarder's p50 minus the direct
path's p50 (no forwarder). The variants alternate in short segments.

The load and its sinks are in ``bench/udp_load.py``, the pings in ``bench/latency.py``; this file
is the run: set-up, interleaved windows, result, criteria and report.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import click

from bench import nginx_ref
from bench.harness.bounds import Deadline, poll_until
from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.pinning import cpus_of, own_cpus_restored, pin_process
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import spread
from bench.harness.verdict import verdict_lines
from bench.latency import LatencyResult, measure_latency, set_recv_timeout
from bench.plain_forwarder import DEFAULT_BUFFER_BYTES
from bench.plots.relay_pps import relay_figure
from bench.udp_load import (
    SO_RCVBUF_MIN,
    Generator,
    rtp_like_payload,
    sink_socket,
    skb_truesize,
)
from common import encap, stun
from testbed.ports import free_port
from testbed.processes import RelayProcess, stop_process
from testbed.procfs import UdpPortStats, cpu_ns, udp_key, udp_sockets, user_system_s
from testbed.standin import StandInTransceiver, hint_request

HOST = "127.0.0.1"
THROUGHPUT_TID = 3  # the stand-in transceiver that sinks the throughput flows
LATENCY_TID = 4  # the socket this process reads for latency pings through the relay
CPU_RATIO_MAX = 0.7
TIER_RATIO_MAX = 1.1  # route / relay: forwarding to another relay vs to a transceiver
ROUTE_CLUSTER = 1  # the cluster the route variant's flows are for (the relay's own is 7)
ADDED_LATENCY_MAX_US = 20.0
SATURATED_CPU_FRACTION = 0.9
# The relay caps pending flows per source /24 (default 64) and every loopback client shares one,
# so flows are set up in waves that stay below that cap.
SETUP_WAVE = 32


@dataclass(frozen=True)
class BenchConfig:
    rounds: int = 5
    window_s: float = 3.0
    warmup_s: float = 0.5
    flows: int = 64
    workers: int = 1
    payload_bytes: int = 172  # RTP header (12 B) + 20 ms of G.711 (160 B)
    batch_per_send: int = 32
    latency_rate_pps: int = 2000
    latency_s: float = 2.0
    max_packets_per_window: int = 50_000_000
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    out_dir: str = str(RESULTS_DIR)
    nginx: str | None = None
    quick: bool = False  # a smoke test: the criteria are not judged
    tiers_only: bool = False  # only the relay and route variants, no reference forwarders

    def expected_run_s(self) -> float:
        windows = self.rounds * 4 * (self.window_s + self.warmup_s + 1.0)
        return windows + 4 * (self.latency_s + 1.0) + 30.0


# -- what one window measures of one forwarder -----------------------------------------------------
@dataclass
class Snapshot:
    t_ns: int
    pids: tuple[int, ...]
    cpu_ns: tuple[int, ...]
    user_s: float
    system_s: float
    sink: UdpPortStats
    listen_drops: int
    relay_packets: float | None = None
    relay_drops: float | None = None


@dataclass
class Forwarder:
    """One variant: where to send, which processes forward, which port sinks the output."""

    name: str
    listen: tuple[str, int]
    sink: tuple[str, int]
    sink_truesize: int
    pids: Callable[[], list[int]]
    relay: RelayProcess | None = None

    def snapshot(self) -> Snapshot:
        t_ns = time.perf_counter_ns()
        pids = tuple(self.pids())
        cpu = tuple(cpu_ns(p) for p in pids)
        user_system = [user_system_s(p) for p in pids]
        sockets = udp_sockets()
        snap = Snapshot(
            t_ns,
            pids,
            cpu,
            sum(u for u, _ in user_system),
            sum(s for _, s in user_system),
            sockets.get(udp_key(self.sink), UdpPortStats(0, 0)),
            sockets.get(udp_key(self.listen), UdpPortStats(0, 0)).drops,
        )
        if self.relay is not None:
            snap.relay_packets = self.relay.metric(
                "rtcedge_relay_packets_total", direction="client_to_transceiver"
            )
            snap.relay_drops = self.relay.metric("rtcedge_relay_dropped_packets_total")
        return snap


@dataclass
class Window:
    """One variant's measurement in one round."""

    variant: str
    round: int
    wall_s: float
    packets: int
    offered_packets: int
    cpu_s: float
    cpu_fraction_min: float  # of the least busy forwarding process
    listen_drops: int
    packets_per_s: float
    cpu_us_per_packet: float
    user_us_per_packet: float  # clock-tick resolution: a profiling hint, not a criterion
    system_us_per_packet: float
    saturated: bool
    valid: bool  # same forwarding processes at both ends of the window
    relay_counter_packets: float | None = None
    relay_drops: float | None = None

    @property
    def counted(self) -> bool:
        return self.saturated and self.valid and self.packets > 0


def measure_window(gen: Generator, fwd: Forwarder, cfg: BenchConfig, round_no: int) -> Window:
    a, b, offered = gen.offer(
        fwd.listen, cfg.warmup_s, cfg.window_s, cfg.max_packets_per_window, fwd.snapshot
    )
    wall_s = (b.t_ns - a.t_ns) / 1e9
    queued = round((b.sink.queued_bytes - a.sink.queued_bytes) / fwd.sink_truesize)
    packets = b.sink.drops - a.sink.drops + queued
    valid = a.pids == b.pids and bool(a.pids)
    cpu = [y - x for x, y in zip(a.cpu_ns, b.cpu_ns, strict=False)] if valid else [0]
    cpu_s = sum(cpu) / 1e9
    frac = min(cpu) / 1e9 / wall_s if wall_s > 0 else 0.0
    return Window(
        variant=fwd.name,
        round=round_no,
        wall_s=wall_s,
        packets=packets,
        offered_packets=offered,
        cpu_s=cpu_s,
        cpu_fraction_min=frac,
        listen_drops=b.listen_drops - a.listen_drops,
        packets_per_s=packets / wall_s if wall_s > 0 else 0.0,
        cpu_us_per_packet=cpu_s * 1e6 / packets if packets > 0 else math.inf,
        user_us_per_packet=(b.user_s - a.user_s) * 1e6 / packets if packets > 0 else math.inf,
        system_us_per_packet=(b.system_s - a.system_s) * 1e6 / packets if packets > 0 else math.inf,
        # Saturated: busy all the time and offered more than it took.
        saturated=frac >= SATURATED_CPU_FRACTION and b.listen_drops > a.listen_drops,
        valid=valid,
        relay_counter_packets=(
            b.relay_packets - a.relay_packets if a.relay_packets is not None else None
        ),
        relay_drops=(b.relay_drops - a.relay_drops if a.relay_drops is not None else None),
    )


# -- the set-up: relay, flows, references ----------------------------------------------------------
def start_relay(
    cfg: BenchConfig, stack: contextlib.ExitStack
) -> tuple[RelayProcess, StandInTransceiver, socket.socket]:
    """The relay with its stand-in transceiver (the throughput flows' sink) and the socket this
    process reads as the latency flow's transceiver. Started first, while this process may still
    run anywhere: the supervisor pins worker i to the i-th CPU this process allows."""
    standin = stack.enter_context(StandInTransceiver(THROUGHPUT_TID))
    lat_sink = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    lat_sink.bind((HOST, 0))
    set_recv_timeout(lat_sink, 0.05)
    relay = RelayProcess(
        {THROUGHPUT_TID: standin.address, LATENCY_TID: lat_sink.getsockname()[:2]},
        workers=cfg.workers,
        pin=True,
        # Nothing answers the throughput flows after set-up (the sink is silent), so nothing
        # refreshes them: keep them for the whole run. The hot path does not depend on the TTL.
        extra_args=["--idle-ttl", str(max(45, int(2 * cfg.expected_run_s())))],
    )
    stack.callback(relay.stop)
    relay.start()
    if len(relay.worker_pids()) != cfg.workers:
        raise RuntimeError(f"relay has {len(relay.worker_pids())} workers, expected {cfg.workers}")
    return relay, standin, lat_sink


def start_route_relay(
    cfg: BenchConfig, stack: contextlib.ExitStack
) -> tuple[RelayProcess, StandInTransceiver]:
    """An edge relay with no transceiver, routing ``ROUTE_CLUSTER`` to a stand-in of that
    cluster's relay ingress (it answers the set-up's Binding requests like a transceiver, then
    sinks). Started before the generator is pinned, as ``start_relay``."""
    ingress = stack.enter_context(StandInTransceiver(THROUGHPUT_TID))
    relay = RelayProcess(
        {},
        workers=cfg.workers,
        pin=True,
        routes={ROUTE_CLUSTER: [ingress.address]},
        # Probes go to the sink too: once at start, then rarely (nothing answers them).
        extra_args=[
            "--idle-ttl", str(max(45, int(2 * cfg.expected_run_s()))),
            "--route-probe-interval", "3600",
        ],
    )  # fmt: skip
    stack.callback(relay.stop)
    relay.start()
    return relay, ingress


def place_generator(relay: RelayProcess, allowed: set[int], notes: list[str]) -> tuple[int, set]:
    """The forwarders' CPU (the first relay worker's) and the generator's (the others)."""
    relay_cpus = cpus_of(relay.worker_pids())
    fwd_cpu = min(os.sched_getaffinity(relay.worker_pids()[0]))
    gen_cpus = (allowed - relay_cpus) or (allowed - {fwd_cpu}) or allowed
    if gen_cpus & relay_cpus:
        notes.append(
            f"the generator shares CPUs {sorted(gen_cpus & relay_cpus)} with relay workers: "
            "neither the CPU nor the latency comparison is meaningful on this machine"
        )
    return fwd_cpu, gen_cpus


def confirm_flows(
    relay: RelayProcess,
    socks: list[socket.socket],
    tid: int,
    timeout_s: float = 30.0,
    cluster: int | None = None,
) -> None:
    """Complete the STUN + hint step for every client socket: send a Binding request carrying a
    signed hint and wait for the Binding success the transceiver returns through the relay (the
    relay confirms the flow on the way back)."""
    deadline = Deadline.after(timeout_s)
    todo = list(socks)
    for _attempt in range(3):
        missed: list[socket.socket] = []
        for i in range(0, len(todo), SETUP_WAVE):
            missed += confirm_wave(
                relay, todo[i : i + SETUP_WAVE], tid, min(deadline.left_s(), 1.0), cluster
            )
        todo = missed
        if not todo:
            return
    raise RuntimeError(f"{len(todo)} of {len(socks)} flows were not confirmed by the relay")


def confirm_wave(
    relay: RelayProcess,
    wave: list[socket.socket],
    tid: int,
    timeout_s: float,
    cluster: int | None = None,
) -> list[socket.socket]:
    """One wave of ``confirm_flows``; returns the sockets that got no Binding success in time.
    ``cluster``: the hint's (default: the relay's own)."""
    waiting = {s.fileno(): s for s in wave}
    poller = select.poll()
    for s in wave:
        packet, _ufrag = hint_request(
            relay.keyring, relay.cluster if cluster is None else cluster, tid
        )
        s.sendto(packet, relay.address)
        poller.register(s, select.POLLIN)
    deadline = Deadline.after(timeout_s)
    while waiting and (left_s := deadline.left_s()) > 0:
        for fd, _ in poller.poll(left_s * 1000):
            with contextlib.suppress(BlockingIOError):
                data = waiting[fd].recv(2048)
                if data[:2] == b"\x01\x01":  # Binding success
                    poller.unregister(fd)
                    del waiting[fd]
    return list(waiting.values())


def confirm_latency_flow(relay: RelayProcess, client: socket.socket, sink: socket.socket) -> None:
    """The STUN + hint step for the latency flow, with this process as its transceiver."""
    for _attempt in range(3):
        packet, _ufrag = hint_request(relay.keyring, relay.cluster, LATENCY_TID)
        client.sendto(packet, relay.address)
        try:
            data, relay_internal = sink.recvfrom(2048)
            header, offset = encap.decode_header(data)
            msg = stun.parse(data[offset:])
            reply = stun.binding_success(msg.transaction_id, (header.client_ip, header.client_port))
            sink.sendto(data[:offset] + reply, relay_internal)
            if client.recv(2048)[:2] == b"\x01\x01":
                return
        except (BlockingIOError, TimeoutError, encap.EncapError, stun.StunError):
            continue
    raise RuntimeError("the latency flow was not confirmed by the relay")


def confirm_all_flows(
    relay: RelayProcess,
    standin: StandInTransceiver,
    gen: Generator,
    lat_sink: socket.socket,
    stack: contextlib.ExitStack,
) -> socket.socket:
    """The throughput flows, then the stand-in turned into a silent sink, then the latency
    flow; returns the latency flow's client socket."""
    confirm_flows(relay, gen.socks, THROUGHPUT_TID)
    silence(standin)
    lat_client = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    lat_client.bind((HOST, 0))
    set_recv_timeout(lat_client, 0.5)
    set_recv_timeout(lat_sink, 0.5)
    confirm_latency_flow(relay, lat_client, lat_sink)
    set_recv_timeout(lat_sink, 0.05)
    return lat_client


def silence(standin: StandInTransceiver) -> None:
    """Turn a stand-in that answered the set-up into a sink that costs no CPU."""
    standin.reading = False
    time.sleep(0.1)  # let the stand-in's thread leave its last receive
    standin.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SO_RCVBUF_MIN)


@dataclass
class Reference:
    """A reference forwarder: its throughput variant, and where its latency path listens."""

    forwarder: Forwarder
    latency_listen: tuple[str, int]


def start_plain(
    listen: tuple[str, int], to: tuple[str, int], cfg: BenchConfig
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "bench.plain_forwarder"]
    args += ["--listen", f"{listen[0]}:{listen[1]}", "--to", f"{to[0]}:{to[1]}"]
    args += ["--max-seconds", str(2 * cfg.expected_run_s())]
    args += ["--buffer-bytes", str(cfg.buffer_bytes)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    bound = poll_until(lambda: udp_key(listen) in udp_sockets(), bool, 10.0, 0.02)
    if not bound:
        stop_process(proc)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"plain forwarder did not start: {err.strip()[-500:]}")
    return proc


def start_plain_reference(
    cfg: BenchConfig, stack: contextlib.ExitStack, lat_sink: tuple[str, int], fwd_cpu: int
) -> Reference:
    """Two plain forwarders on the forwarders' CPU: one to a sink, one on the latency path."""
    sink = stack.enter_context(sink_socket()).getsockname()[:2]
    listen, lat_listen = (HOST, free_port(HOST)), (HOST, free_port(HOST))
    procs = [start_plain(listen, sink, cfg)]
    stack.callback(stop_process, procs[0])
    procs.append(start_plain(lat_listen, lat_sink, cfg))
    stack.callback(stop_process, procs[1])
    for proc in procs:
        pin_process(proc.pid, {fwd_cpu})
    truesize = skb_truesize(cfg.payload_bytes)
    return Reference(Forwarder("plain", listen, sink, truesize, lambda: [procs[0].pid]), lat_listen)


def start_nginx_reference(
    cfg: BenchConfig,
    stack: contextlib.ExitStack,
    lat_sink: tuple[str, int],
    cpus: tuple[int, set[int]],
    echo: Echo,
) -> Reference | str:
    """nginx's stream proxy, its worker on the forwarders' CPU and its master on the
    generator's; or why it is skipped."""
    fwd_cpu, gen_cpus = cpus
    binary, note = nginx_ref.find_nginx(cfg.nginx)
    echo(note)
    if binary is None:
        return note
    sink = stack.enter_context(sink_socket()).getsockname()[:2]
    listen, lat_listen = (HOST, free_port(HOST)), (HOST, free_port(HOST))
    proxy = nginx_ref.NginxProxy(binary, [(listen, sink), (lat_listen, lat_sink)], cfg.buffer_bytes)
    stack.callback(proxy.stop)
    problem = proxy.check()
    if problem:
        skipped = f"nginx -t rejected the configuration: {problem}"
        echo(skipped)
        return skipped
    proxy.start()
    pin_process(proxy.proc.pid, gen_cpus)  # type: ignore[union-attr]
    for pid in proxy.worker_pids():
        pin_process(pid, {fwd_cpu})
    truesize = skb_truesize(cfg.payload_bytes)
    return Reference(Forwarder("nginx", listen, sink, truesize, proxy.worker_pids), lat_listen)


# -- the measurement -------------------------------------------------------------------------------
def measure_rounds(
    gen: Generator, forwarders: list[Forwarder], cfg: BenchConfig, progress: Progress
) -> list[Window]:
    """One window per variant per round, the variants interleaved, the order rotated."""
    windows: list[Window] = []
    for r in range(cfg.rounds):
        order = forwarders[r % len(forwarders) :] + forwarders[: r % len(forwarders)]
        for fwd in order:
            w = measure_window(gen, fwd, cfg, r)
            windows.append(w)
            progress.step(
                f"round {r + 1}/{cfg.rounds} {fwd.name:6} {w.packets_per_s:12,.0f} packets/s "
                f"{w.cpu_us_per_packet:7.3f} CPU us/packet  CPU {100 * w.cpu_fraction_min:5.1f}% "
                f"listen drops {w.listen_drops:>9}"
                + ("" if w.valid else "  INVALID (forwarder restarted)")
            )
            time.sleep(0.1)  # the forwarder drains its queue before the next window
    return windows


@dataclass
class Rig:
    """What a run measures, started, its flows confirmed and its processes pinned; the run's
    exit stack tears it down."""

    relay: RelayProcess
    route_relay: RelayProcess
    gen: Generator
    payload: bytes
    forwarders: list[Forwarder]  # the relay first, then the route, then the references
    skipped: dict[str, str]  # a reference that could not run: why
    latency_paths: dict[str, tuple[str, int]]  # "direct" (no forwarder) first
    latency_client: socket.socket
    latency_sink: socket.socket
    fwd_cpu: int
    gen_cpus: set[int]


def set_up(
    cfg: BenchConfig, stack: contextlib.ExitStack, allowed: set[int], notes: list[str], echo: Echo
) -> Rig:
    """The relay and its flows, then the references on the relay worker's CPU."""
    relay, standin, lat_sink = start_relay(cfg, stack)
    route_relay, ingress = start_route_relay(cfg, stack)
    fwd_cpu, gen_cpus = place_generator(relay, allowed, notes)
    if cpus_of(route_relay.worker_pids()) != cpus_of(relay.worker_pids()):
        notes.append("the route relay's workers are not on the relay's CPUs")
    payload = rtp_like_payload(cfg.payload_bytes)
    gen = Generator(cfg.flows, payload, cfg.batch_per_send)
    stack.callback(gen.close)
    lat_client = confirm_all_flows(relay, standin, gen, lat_sink, stack)
    confirm_flows(route_relay, gen.socks, THROUGHPUT_TID, cluster=ROUTE_CLUSTER)
    silence(ingress)
    echo(
        f"relay: {cfg.workers} worker(s) {relay.worker_pids()} on CPUs "
        f"{sorted(cpus_of(relay.worker_pids()))}, {cfg.flows} flows confirmed; route relay "
        f"{route_relay.worker_pids()} likewise, its flows to cluster {ROUTE_CLUSTER}'s ingress"
    )
    truesize = skb_truesize(cfg.payload_bytes + encap.HEADER_LEN_V4)
    relay_fwd = Forwarder(
        "relay", relay.address, standin.address, truesize, relay.worker_pids, relay
    )
    route_fwd = Forwarder(
        "route", route_relay.address, ingress.address, truesize, route_relay.worker_pids,
        route_relay,
    )  # fmt: skip
    lat_sink_address = lat_sink.getsockname()[:2]
    rig = Rig(
        relay, route_relay, gen, payload, [relay_fwd, route_fwd], {},
        {"direct": lat_sink_address, "relay": relay.address},
        lat_client, lat_sink, fwd_cpu, gen_cpus,
    )  # fmt: skip
    if cfg.tiers_only:
        rig.skipped["plain"] = rig.skipped["nginx"] = "--tiers-only"
        return rig
    plain = start_plain_reference(cfg, stack, lat_sink_address, fwd_cpu)
    rig.forwarders.append(plain.forwarder)
    rig.latency_paths["plain"] = plain.latency_listen
    nginx = start_nginx_reference(cfg, stack, lat_sink_address, (fwd_cpu, gen_cpus), echo)
    if isinstance(nginx, str):
        rig.skipped["nginx"] = nginx
    else:
        rig.forwarders.append(nginx.forwarder)
        rig.latency_paths["nginx"] = nginx.latency_listen
    return rig


def run(cfg: BenchConfig, echo: Echo = click.echo) -> dict[str, Any]:
    """Set everything up, measure, tear everything down (by PID) whatever happens."""
    started = utc_now()
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        allowed = stack.enter_context(own_cpus_restored())
        rig = set_up(cfg, stack, allowed, notes, echo)
        # From here on this process is the generator: keep it, and the relay's supervisor, off
        # the forwarders' CPU.
        pin_process(os.getpid(), rig.gen_cpus)
        pin_process(rig.relay.proc.pid, rig.gen_cpus)  # type: ignore[union-attr]
        pin_process(rig.route_relay.proc.pid, rig.gen_cpus)  # type: ignore[union-attr]
        window_s = cfg.warmup_s + cfg.window_s + 0.2
        progress = Progress(
            [window_s] * (cfg.rounds * len(rig.forwarders))
            + [len(rig.latency_paths) * cfg.latency_s + 0.5],
            echo,
            cfg.quick,
        )
        progress.announce(
            f"measuring {cfg.rounds} rounds x {len(rig.forwarders)} forwarders, then latency"
        )
        windows = measure_rounds(rig.gen, rig.forwarders, cfg, progress)
        notes += [
            f"relay dropped {w.relay_drops:.0f} packets in round {w.round + 1}"
            for w in windows
            if w.relay_drops
        ]
        time.sleep(0.3)
        lat = measure_latency(
            rig.latency_paths,
            rig.latency_client,
            rig.latency_sink,
            cfg.latency_rate_pps,
            cfg.latency_s,
            rig.payload,
        )
        progress.step(f"latency of {len(lat)} paths")
    result = run_header("relay_pps", started, allowed, cfg)
    result["cpus"] = {"forwarders": rig.fwd_cpu, "generator": sorted(rig.gen_cpus)}
    result["notes"] = notes
    add_figures(result, cfg, rig, windows, lat)
    result["criteria"] = criteria(result)
    return result


# -- the result ------------------------------------------------------------------------------------
def add_figures(
    result: dict[str, Any],
    cfg: BenchConfig,
    rig: Rig,
    windows: list[Window],
    lat: dict[str, LatencyResult],
) -> None:
    """Per variant its windows and their summary (or why it was skipped), the CPU ratios per
    round, the latencies."""
    result["counting"] = (
        "sink socket drops + queued datagrams from /proc/net/udp, for every variant"
    )
    result["saturation_rule"] = (
        f"a window counts when its forwarder's CPU time >= {SATURATED_CPU_FRACTION:.0%} of "
        "the wall time and its receive socket dropped datagrams (offered > taken)"
    )
    result["variants"] = {}
    for fwd in rig.forwarders:
        ws = [w for w in windows if w.variant == fwd.name]
        result["variants"][fwd.name] = {
            "summary": summarize(ws),
            "windows": [{**asdict(w), "counted": w.counted} for w in ws],
        }
    result["variants"].update({name: {"skipped": why} for name, why in rig.skipped.items()})
    result["ratios"] = {
        f"relay/{f.name}": round_ratios(windows, "relay", f.name) for f in rig.forwarders[2:]
    }
    result["tier_ratios"] = {"route/relay": round_ratios(windows, "route", "relay")}
    result["latency"] = {
        "rate_pps": cfg.latency_rate_pps,
        "seconds": cfg.latency_s,
        "paths": {name: asdict(res) for name, res in lat.items()},
    }


def summarize(windows: list[Window]) -> dict[str, Any]:
    """Medians over the saturated windows (over all of them, flagged, if none was saturated)."""
    counted = [w for w in windows if w.counted]
    basis = counted or [w for w in windows if w.packets > 0]
    return {
        "rounds": len(windows),
        "saturated_rounds": len(counted),
        "summary_over": "saturated rounds" if counted else "all rounds (none saturated)",
        "packets_per_s": spread([w.packets_per_s for w in basis]),
        "cpu_us_per_packet": spread([w.cpu_us_per_packet for w in basis]),
        "user_us_per_packet": spread([w.user_us_per_packet for w in basis]),
        "system_us_per_packet": spread([w.system_us_per_packet for w in basis]),
        "cpu_fraction": spread([w.cpu_fraction_min for w in basis]),
        "offered_packets_per_s": spread([w.offered_packets / w.wall_s for w in basis]),
    }


def round_ratios(windows: list[Window], num: str, den: str) -> dict[str, Any]:
    """Per round CPU per packet of ``num`` / ``den``, over rounds where both were saturated."""
    by_round: dict[int, dict[str, Window]] = {}
    for w in windows:
        by_round.setdefault(w.round, {})[w.variant] = w
    per_round = []
    for r, ws in sorted(by_round.items()):
        if num in ws and den in ws and ws[num].packets > 0 and ws[den].packets > 0:
            per_round.append(
                {
                    "round": r,
                    "ratio": ws[num].cpu_us_per_packet / ws[den].cpu_us_per_packet,
                    "counted": ws[num].counted and ws[den].counted,
                }
            )
    counted = [x["ratio"] for x in per_round if x["counted"]]
    basis = counted or [x["ratio"] for x in per_round]
    return {"per_round": per_round, "over_saturated_rounds": bool(counted), **spread(basis)}


def ratio_criterion(key: str, ratio: dict[str, Any], bound: float) -> dict[str, Any]:
    """CPU per packet of one variant over another's, at most ``bound`` over saturated rounds."""
    value = ratio["median"]
    ok = ratio["n"] > 0 and value <= bound and ratio["over_saturated_rounds"]
    return {
        "name": f"cpu per packet {key} <= {bound}",
        "value": value,
        "pass": bool(ok),
        "detail": f"median {value:.3f} over {ratio['n']} rounds"
        + ("" if ratio["over_saturated_rounds"] else " (forwarders not saturated)"),
    }


def criteria(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = [ratio_criterion(k, r, CPU_RATIO_MAX) for k, r in result["ratios"].items()]
    out += [ratio_criterion(k, r, TIER_RATIO_MAX) for k, r in result.get("tier_ratios", {}).items()]
    paths = result["latency"]["paths"]
    if "relay" in paths and "plain" in paths:
        diff = paths["relay"]["added_p50_us"] - paths["plain"]["added_p50_us"]
        out.append(
            {
                "name": f"added latency p50 relay - plain <= {ADDED_LATENCY_MAX_US:.0f} us",
                "value": diff,
                "pass": bool(diff <= ADDED_LATENCY_MAX_US),
                "detail": f"{paths['relay']['added_p50_us']:.1f} - "
                f"{paths['plain']['added_p50_us']:.1f} = {diff:.1f} us",
            }
        )
    return out


# -- the report ------------------------------------------------------------------------------------
def fmt_spread(s: dict[str, Any], pattern: str) -> str:
    if not s["n"]:
        return "-"
    return f"{pattern.format(s['median'])} ({pattern.format(s['min'])}-{pattern.format(s['max'])})"


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo(
        f"relay_pps: {cfg['rounds']} rounds x {cfg['window_s']} s, {cfg['flows']} flows, "
        f"{cfg['payload_bytes']}-byte payloads, {cfg['workers']} relay worker(s); "
        f"forwarders on CPU {result['cpus']['forwarders']}, "
        f"generator on CPU {result['cpus']['generator']}"
    )
    print_throughput(result, echo)
    echo("")
    print_latency(result["latency"], echo)
    echo("")
    for line in verdict_lines(result):
        echo(line)


def print_throughput(result: dict[str, Any], echo: Echo) -> None:
    """Per variant packets/s and CPU per packet over its saturated windows; the ratios."""
    echo(
        f"{'variant':8} {'packets/s median (min-max)':32} {'CPU us/packet median (min-max)':32} "
        f"{'user+sys us':>12} {'CPU %':>6} {'saturated':>10}"
    )
    for name, v in result["variants"].items():
        if "skipped" in v:
            echo(f"{name:8} skipped: {v['skipped']}")
            continue
        s = v["summary"]
        echo(
            f"{name:8} {fmt_spread(s['packets_per_s'], '{:,.0f}'):32} "
            f"{fmt_spread(s['cpu_us_per_packet'], '{:.3f}'):32} "
            f"{s['user_us_per_packet']['median']:5.2f}+{s['system_us_per_packet']['median']:<6.2f} "
            f"{100 * s['cpu_fraction']['median']:6.1f} "
            f"{s['saturated_rounds']:>5}/{s['rounds']}"
        )
    for key, ratio in {**result["ratios"], **result.get("tier_ratios", {})}.items():
        note = "" if ratio["over_saturated_rounds"] else "  (not all windows saturated)"
        echo(f"CPU per packet {key}: {fmt_spread(ratio, '{:.3f}')}{note}")


def print_latency(lat: dict[str, Any], echo: Echo) -> None:
    echo(
        f"latency at {lat['rate_pps']} packets/s, one flow, {lat['seconds']} s per path "
        "(one-way, us):"
    )
    echo(
        f"{'path':8} {'p50':>8} {'p90':>8} {'p99':>8} {'added p50':>10} {'samples':>8} {'lost':>5}"
    )
    for name, r in lat["paths"].items():
        added = "-" if r["added_p50_us"] is None else f"{r['added_p50_us']:.1f}"
        echo(
            f"{name:8} {r['p50_us']:8.1f} {r['p90_us']:8.1f} {r['p99_us']:8.1f} {added:>10} "
            f"{r['samples']:8} {r['lost']:5}"
        )


EXAMPLES = """
\b
Examples:
  rtcedge bench relay                       # 5 interleaved rounds of 3 s, then latency
  rtcedge bench relay --quick               # smoke test: 2 rounds of 1 s
  rtcedge bench relay --nginx /usr/sbin/nginx --rounds 7
  rtcedge bench relay --tiers-only          # relay -> relay (route) vs relay -> transceiver
  rtcedge bench relay --rate 2000,4000,10000,20000   # CPU per packet at fixed offered rates vs C
\b
Prints a line per window as it goes, then a table and PASS/FAIL for its acceptance criteria
(a --quick run does not judge them), writes the JSON result, and exits 0 whatever the figures
are. nginx (with its stream module) is an optional second reference: skipped when absent.
"""


@click.command("relay", epilog=EXAMPLES)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Interleaved rounds; every variant gets one window per round.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0.1),
    default=3.0,
    show_default=True,
    help="Length of one measured window.",
)
@click.option(
    "--flows",
    type=click.IntRange(min=64),
    default=None,
    help="Client flows (one socket each) [default: 64, or 1000 with --workers > 1].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Relay workers.",
)
@click.option(
    "--payload",
    type=click.IntRange(min=16, max=1400),
    default=172,
    show_default=True,
    help="Datagram size in bytes (RTP-like, first byte 0x80).",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=256),
    default=32,
    show_default=True,
    help="Datagrams per sendmmsg of the generator.",
)
@click.option(
    "--latency-rate",
    type=click.IntRange(min=1, max=100_000),
    default=2000,
    show_default=True,
    help="Pings per second in the latency test.",
)
@click.option(
    "--latency-seconds",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds of pings per path [default: 2, 0.5 with --quick].",
)
@click.option(
    "--max-packets",
    type=click.IntRange(min=1000),
    default=50_000_000,
    show_default=True,
    help="Packet bound of one window.",
)
@out_option
@click.option("--nginx", default=None, help="nginx binary [default: nginx on PATH, if any].")
@click.option("--quick", is_flag=True, help="2 rounds of 1 s: a smoke test, not a measurement.")
@click.option(
    "--tiers-only",
    is_flag=True,
    help="Only the relay and route variants (a relay forwarding to a transceiver vs to another "
    "relay), no reference forwarders.",
)
@click.option(
    "--rate",
    "rates",
    default=None,
    help="Rate mode (bench/relay_rate.py): offered packets/s, e.g. 2000,4000,10000,20000; CPU "
    "per forwarded packet of the relay (with and without --coalesce-us) and of a C recvmmsg "
    "forwarder at each rate and saturated. --rounds [2], --seconds [2] per rate.",
)
@click.option(
    "--ping-rate",
    type=click.IntRange(min=1, max=10_000),
    default=200,
    show_default=True,
    help="Rate mode: latency pings per second among the offered packets.",
)
def relay_bench(
    rounds: int,
    seconds: float,
    flows: int | None,
    workers: int,
    payload: int,
    batch: int,
    latency_rate: int,
    latency_seconds: float | None,
    max_packets: int,
    out_dir: str,
    nginx: str | None,
    quick: bool,
    tiers_only: bool,
    rates: str | None,
    ping_rate: int,
) -> None:
    """Packets/s, CPU per packet and added latency of the relay vs reference forwarders."""
    if rates is not None:
        run_rate_mode(
            rates, rounds, seconds, flows, payload, ping_rate, max_packets, out_dir, quick
        )
        return
    if flows is None:
        flows = 1000 if workers > 1 else 64
    elif workers > 1 and flows < 1000:
        raise click.UsageError("--flows must be at least 1000 with --workers > 1")
    if quick:
        rounds, seconds = 2, 1.0
    cfg = BenchConfig(
        rounds=rounds,
        window_s=seconds,
        warmup_s=0.2 if quick else 0.5,
        flows=flows,
        workers=workers,
        payload_bytes=payload,
        batch_per_send=batch,
        latency_rate_pps=latency_rate,
        latency_s=latency_seconds or (0.5 if quick else 2.0),
        max_packets_per_window=max_packets,
        out_dir=out_dir,
        nginx=nginx,
        quick=quick,
        tiers_only=tiers_only,
    )
    run_and_report("relay_pps", lambda: run(cfg), print_report, cfg.out_dir, relay_figure)


def run_rate_mode(
    rates: str, rounds: int, seconds: float, flows: int | None, payload: int, ping_rate: int,
    max_packets: int, out_dir: str, quick: bool,
) -> None:  # fmt: skip
    """``--rate``: bench/relay_rate.py, with this command's bounds (defaults of its own where
    the option was left at the saturated mode's default)."""
    from bench import relay_rate
    from bench.plots.relay_rate import relay_rate_figure

    ctx = click.get_current_context()
    given = {
        name for name in ("rounds", "seconds", "max_packets")
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    }  # fmt: skip
    default = relay_rate.RateConfig()
    cfg = relay_rate.RateConfig(
        rates=relay_rate.parse_rates(rates),
        rounds=1 if quick else (rounds if "rounds" in given else default.rounds),
        window_s=0.5 if quick else (seconds if "seconds" in given else default.window_s),
        warmup_s=0.1 if quick else default.warmup_s,
        saturated_window_s=0.5 if quick else default.saturated_window_s,
        flows=flows or default.flows,
        payload_bytes=payload,
        ping_rate_pps=ping_rate,
        max_packets_per_window=(
            max_packets if "max_packets" in given else default.max_packets_per_window
        ),
        out_dir=out_dir,
        quick=quick,
    )
    run_and_report(
        "relay_rate", lambda: relay_rate.run(cfg), relay_rate.print_report, out_dir,
        relay_rate_figure,
    )  # fmt: skip


if __name__ == "__main__":
    relay_bench()
