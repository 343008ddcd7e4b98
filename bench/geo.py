"""``rtcedge bench geo``: callers far from the cluster, entering directly or at a near edge.

Real aiortc callers (several at once, testbed/caller_workers.py) call a transceiver (echo
backend) over emulated links on loopback (testbed/linkproxy.py; no tc/netem here):

- ``direct``: caller -> public link (default 80 ms ± 15 ms, 2 % loss) -> cluster relay ->
  transceiver;
- ``edge``: caller -> access link (10 ms ± 2 ms, 0.5 %) -> edge relay -> backbone link
  (60 ms ± 1 ms, 0.01 %) -> the cluster relay's ``--peer-listen`` -> transceiver. Needs the
  relay tiers (``--route``, ``--peer-listen``, ``--peer-network``): without them in
  ``relay serve --help`` the variant is skipped with a note.

Each link has the same settings both ways, a model per direction and per source (NAT-like).
The transceiver advertises the first link's address, so callers' media crosses the links both
ways; relays admit only the links' outside addresses (``--allow-network``), so no reply can
bypass a link towards a caller's own host candidate.

Per call: offer -> connected, offer -> first echoed audio (the caller hears its own tone), audio
frame loss and RTP loss of the echo over a window, jitter (RFC 3550: of the echo stream as the
caller receives it, and of the caller's stream as the transceiver's receiver reports say), RTT
(aiortc's smoothed RTT from RTCP SR/RR, LSR/DLSR; median of samples every few seconds).
The emulator is checked in the same run: probe flows at voice rate through a twin of each link
(same settings, same event loop, same load) measure one-way delay and loss per direction;
mean delay within 10 % and loss within 10 % (or, when too few datagrams to resolve that,
consistent with the setting) is the PASS line.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.harness.cli import Echo, out_option, run_and_report
from bench.harness.progress import Progress
from bench.harness.results import RESULTS_DIR, run_header, utc_now
from bench.harness.stats import percentile
from bench.harness.verdict import verdict
from bench.plots.geo import geo_figure
from bench.sessions_step import call_figures
from common.config import format_host_port
from testbed.caller_workers import WorkerProcess, connect, hang_up, link_stats, mark, start_workers
from testbed.linkmodel import LinkSpec
from testbed.linkprobe import LinkProbe, check, direction_figures
from testbed.linkproxy import LinkProxy, LinkThread
from testbed.ports import free_port
from testbed.processes import RelayProcess, TransceiverProcess

VARIANTS = ("direct", "edge")
CLUSTER = 7
EDGE_CLUSTER = 8
# Loopback addresses the links send from: relays admit only these (no bypass of a link).
PUBLIC_OUTSIDE = "127.0.0.2"
ACCESS_OUTSIDE = "127.0.0.3"
BACKBONE_OUTSIDE = "127.0.0.4"
FIRST_TONE_HZ = 300
TONE_STEP_HZ = 60
TIERS_OPTIONS = ("--route", "--peer-listen", "--peer-network")
TOLERANCE = 0.10
VARIANT_OVERHEAD_S = 20.0  # start, connect, settle, hang up, stop: rough, for the progress line
METHOD = {
    "connect": "offer created -> ICE+DTLS connected (aiortc connectionState), per call",
    "first_echo": "offer created -> first audible echo frame carrying the caller's own tone",
    "frame_loss": "1 - audible echo frames received / (window / 20 ms), per call (both ways: "
    "a frame lost towards the transceiver is not echoed)",
    "rtp_loss": "sequence gaps of the echo stream (the way back only), RFC 3550 A.3",
    "jitter": "RFC 3550 interarrival jitter of the echo stream at the caller (way back, "
    "transceiver's send timing included; arrival clock in whole ms); forward_jitter: the "
    "transceiver's receiver reports on the caller's stream",
    "rtt": "aiortc's smoothed RTT (0.85 EWMA) from RTCP SR/RR LSR/DLSR at the caller, sampled "
    "every stats_every_s, median per call",
    "emulator_check": "probe flows at probe_pps each through a twin proxy of every link in the "
    "same event loop during the window; one-way delay per direction on one clock",
}


@dataclass(frozen=True)
class LinkSettings:
    delay_ms: float
    jitter_ms: float
    loss_pct: float

    def spec(self, reorder: bool) -> LinkSpec:
        return LinkSpec(self.delay_ms, self.jitter_ms, self.loss_pct, reorder=reorder)


@dataclass(frozen=True)
class GeoConfig:
    callers: int = 6
    window_s: float = 60.0
    settle_s: float = 3.0
    connect_timeout_s: float = 20.0
    stats_every_s: float = 5.0
    public: LinkSettings = LinkSettings(80.0, 15.0, 2.0)
    access: LinkSettings = LinkSettings(10.0, 2.0, 0.5)
    backbone: LinkSettings = LinkSettings(60.0, 1.0, 0.01)
    reorder: bool = False
    seed: int = 1
    probe_flows: int = 4
    probe_pps: float = 50.0
    variants: tuple[str, ...] = VARIANTS
    caller_workers: int = 2
    out_dir: str = str(RESULTS_DIR)
    quick: bool = False


def tiers_available() -> bool:
    """Whether this checkout's relay has the tier options the edge variant needs."""
    out = subprocess.run(
        [sys.executable, "-m", "relay", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return all(option in out for option in TIERS_OPTIONS)


# -- one variant ---------------------------------------------------------------------------------
@dataclass
class Link:
    """An emulated link on the path, and the probes through its twin."""

    name: str
    settings: LinkSettings
    proxy: LinkProxy
    probes: list[LinkProbe] = field(default_factory=list)


@dataclass
class Topology:
    """What a variant started: links (in order from the caller), relays, the transceiver."""

    links: list[Link]
    relays: list[RelayProcess]
    trx: TransceiverProcess


def add_link(
    links: LinkThread,
    name: str,
    settings: LinkSettings,
    target: tuple[str, int],
    outside: str,
    cfg: GeoConfig,
) -> Link:
    spec = settings.spec(cfg.reorder)
    proxy = LinkProxy(
        target, spec, spec, seed=cfg.seed, outside_host=outside, name=name, max_seconds=900
    )
    return Link(name, settings, links.add(proxy))


def start_probes(links: LinkThread, link: Link, cfg: GeoConfig, duration_s: float) -> None:
    """``probe_flows`` probes at ``probe_pps`` each, through a twin of ``link``: same settings,
    seeds of their own, the same event loop."""
    spec = link.settings.spec(cfg.reorder)
    count = max(1, int(cfg.probe_pps * duration_s))
    for i in range(cfg.probe_flows):
        probe = LinkProbe(cfg.probe_pps, count)
        twin = LinkProxy(
            probe.reflector_address,
            spec,
            spec,
            seed=f"{cfg.seed}/probe{i}",
            name=f"{link.name}-probe",
            max_seconds=duration_s + 60,
        )
        probe.via = links.add(twin).address
        link.probes.append(links.add(probe))


def start_direct(links: LinkThread, stack: contextlib.ExitStack, cfg: GeoConfig) -> Topology:
    relay = RelayProcess({}, workers=1, cluster=CLUSTER, allow_networks=(f"{PUBLIC_OUTSIDE}/32",))
    public = add_link(links, "public", cfg.public, relay.address, PUBLIC_OUTSIDE, cfg)
    trx = start_transceiver(relay, public.proxy.address, stack, cfg)
    stack.callback(relay.stop)
    relay.start()
    return Topology([public], [relay], trx)


def start_edge(links: LinkThread, stack: contextlib.ExitStack, cfg: GeoConfig) -> Topology:
    peer_port = free_port()
    cluster = RelayProcess(
        {},
        workers=1,
        cluster=CLUSTER,
        allow_networks=(f"{ACCESS_OUTSIDE}/32",),
        extra_args=[
            "--peer-listen",
            format_host_port("127.0.0.1", peer_port),
            "--peer-network",
            f"{BACKBONE_OUTSIDE}/32",
        ],
    )
    backbone = add_link(
        links, "backbone", cfg.backbone, ("127.0.0.1", peer_port), BACKBONE_OUTSIDE, cfg
    )
    edge = RelayProcess(
        {},
        workers=1,
        cluster=EDGE_CLUSTER,
        keyring=cluster.keyring,
        allow_networks=(f"{ACCESS_OUTSIDE}/32",),
        extra_args=["--route", f"{CLUSTER}={format_host_port(*backbone.proxy.address)}"],
    )
    access = add_link(links, "access", cfg.access, edge.address, ACCESS_OUTSIDE, cfg)
    trx = start_transceiver(cluster, access.proxy.address, stack, cfg)
    for relay in (cluster, edge):
        stack.callback(relay.stop)
        relay.start()
    return Topology([access, backbone], [edge, cluster], trx)


def start_transceiver(
    relay: RelayProcess,
    advertise: tuple[str, int],
    stack: contextlib.ExitStack,
    cfg: GeoConfig,
) -> TransceiverProcess:
    """The echo transceiver behind ``relay``, advertising the first link (not the relay)."""
    trx = TransceiverProcess(
        relay,
        advertise=advertise,
        extra_args=[
            "--drain-grace", "2",
            "--max-sessions", str(cfg.callers + 10),
            "--client-rate", "0",  # every call comes from one loopback address
        ],
    )  # fmt: skip
    relay.transceivers = {0: trx.media_address}
    stack.callback(trx.stop, 15.0)
    trx.start()
    return trx


def run_variant(
    name: str, cfg: GeoConfig, workers: list[WorkerProcess], links: LinkThread
) -> dict[str, Any]:
    """Start the variant's path, connect every caller at once, measure a window, hang up."""
    with contextlib.ExitStack() as stack:
        path = (start_direct if name == "direct" else start_edge)(links, stack, cfg)
        shares: dict[WorkerProcess, list[list[int]]] = {w: [] for w in workers}
        for i in range(cfg.callers):
            shares[workers[i % len(workers)]].append([i, FIRST_TONE_HZ + TONE_STEP_HZ * i])
        shares = {w: s for w, s in shares.items() if s}
        busy = list(shares)
        calls = {c["id"]: c for r in connect(shares, path.trx.url, cfg.connect_timeout_s)
                 for c in r["calls"]}  # fmt: skip
        samples: dict[int, list[dict[str, Any]]] = {i: [] for i in calls}
        time.sleep(cfg.settle_s)
        for link in path.links:
            start_probes(links, link, cfg, cfg.window_s)
        marks_a = mark(busy)
        end = time.monotonic() + cfg.window_s
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(cfg.stats_every_s, left))
            for reply in link_stats(busy):
                for key, s in reply["calls"].items():
                    samples[int(key)].append(s)
        marks_b = mark(busy)
        for ma, mb in zip(marks_a, marks_b, strict=True):
            for key, counts in ma["calls"].items():
                figures = call_figures(counts, mb["calls"][key], mb["t"] - ma["t"])
                calls[int(key)].update(figures)
        time.sleep(0.5)  # the last probes' way back
        link_results = {link.name: link_result(link, links) for link in path.links}
        for reply in hang_up(busy):
            for c in reply["calls"]:
                calls[c["id"]].update(c)
        for i, c in calls.items():
            c.update(stats_of(samples[i]))
    per_call = [calls[i] for i in sorted(calls)]
    return {"calls": per_call, "summary": summarize(per_call), "links": link_results}


def stats_of(samples: list[dict[str, Any]]) -> dict[str, float]:
    """A call's RTT (median of samples) and jitter (the last sample: RFC 3550 jitter is already
    a running estimate), in ms."""

    def ms(values: list[float | None], pick: Any) -> float:
        got = [v for v in values if v is not None]
        return 1000 * pick(got) if got else math.nan

    return {
        "rtt_ms": ms([s["rtt_s"] for s in samples], statistics.median),
        "jitter_ms": ms([s["jitter_s"] for s in samples], lambda v: v[-1]),
        "forward_jitter_ms": ms([s["forward_jitter_s"] for s in samples], lambda v: v[-1]),
    }


def link_result(link: Link, links: LinkThread) -> dict[str, Any]:
    """Probe figures per direction against the settings, and what the link's models did."""
    figures = links.call(lambda: [p.figures() for p in link.probes])
    counters = links.call(link.proxy.counters)
    spec = link.settings.spec(reorder=False)
    out: dict[str, Any] = {"settings": asdict(link.settings), "media": counters}
    for direction in ("up", "down"):
        merged = merge_directions([f[direction] for f in figures], link.probes, direction)
        out[direction] = {**merged, **check(merged, spec, TOLERANCE)}
    return out


def merge_directions(
    figures: list[dict[str, Any]], probes: list[LinkProbe], direction: str
) -> dict[str, Any]:
    """One direction's figures over all probe flows."""
    delays = [d for p in probes for d in getattr(p, f"{direction}_delays_s").values()]
    sent = sum(f["sent"] for f in figures)
    return direction_figures(sent, delays)


METRICS = ("connect_ms", "first_echo_ms", "frame_loss_pct", "rtp_loss_pct", "jitter_ms",
           "forward_jitter_ms", "rtt_ms")  # fmt: skip


def call_metric(call: dict[str, Any], metric: str) -> float | None:
    if metric == "connect_ms":
        v = call.get("offer_to_connected_s")
        return None if v is None else 1000 * v
    if metric == "first_echo_ms":
        v = call.get("offer_to_first_echo_s")
        return None if v is None else 1000 * v
    v = call.get(metric)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def summarize(calls: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "calls": len(calls),
        "connected": sum(bool(c.get("connected")) for c in calls),
        "heard_own_echo": sum(c.get("offer_to_first_echo_s") is not None for c in calls),
        "errors": sorted({c["error"] for c in calls if c.get("error")})[:5],
    }
    for metric in METRICS:
        values = sorted(v for c in calls if (v := call_metric(c, metric)) is not None)
        out[metric] = {
            "median": statistics.median(values) if values else math.nan,
            "p90": percentile(values, 0.9),
            "n": len(values),
        }
    return out


def ratios(direct: dict[str, Any], edge: dict[str, Any]) -> dict[str, float]:
    """EDGE / DIRECT of each metric's median (NaN where DIRECT's is 0 or missing)."""
    out = {}
    for metric in METRICS:
        d, e = direct[metric]["median"], edge[metric]["median"]
        out[metric] = e / d if d and math.isfinite(d) and math.isfinite(e) else math.nan
    return out


# -- the run -------------------------------------------------------------------------------------
def run(cfg: GeoConfig, echo: Echo = click.echo) -> dict[str, Any]:
    started = utc_now()
    notes: list[str] = []
    variants = list(cfg.variants)
    if "edge" in variants and not tiers_available():
        variants.remove("edge")
        notes.append(
            "edge skipped: this relay lacks the tier options "
            f"{', '.join(TIERS_OPTIONS)} (issue 11 item 1, not merged yet)"
        )
    progress = Progress([cfg.window_s + VARIANT_OVERHEAD_S] * len(variants), echo, cfg.quick)
    progress.announce(f"geo, {cfg.callers} callers per variant, {', '.join(variants) or 'none'}")
    result: dict[str, Any] = {
        **run_header("geo", started, os.sched_getaffinity(0), cfg),
        "method": METHOD,
        "variants": {},
        "notes": notes,
    }
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        links = stack.enter_context(LinkThread())
        workers = start_workers(
            min(cfg.caller_workers, cfg.callers), 120 + 2 * len(variants) * (cfg.window_s + 60),
            Path(tmp), stack,
        )  # fmt: skip
        for name in variants:
            res = run_variant(name, cfg, workers, links)
            result["variants"][name] = res
            s = res["summary"]
            progress.step(
                f"{name}: {s['connected']}/{s['calls']} connected, connect "
                f"{s['connect_ms']['median']:.0f} ms, RTT {s['rtt_ms']['median']:.0f} ms, "
                f"frame loss {s['frame_loss_pct']['median']:.2f} %"
            )
    if {"direct", "edge"} <= set(result["variants"]):
        result["ratios_edge_over_direct"] = ratios(
            result["variants"]["direct"]["summary"], result["variants"]["edge"]["summary"]
        )
    checks = [
        d["delay_ok"] and d["loss_ok"]
        for v in result["variants"].values()
        for link in v["links"].values()
        for d in (link["up"], link["down"])
    ]
    result["emulator_check"] = {
        "criterion": f"every link, both ways: mean one-way delay within {TOLERANCE:.0%} of the "
        "setting; loss within it, or consistent with it when too few probes to resolve it",
        "passed": bool(checks) and all(checks),
        "verdict": verdict(bool(checks) and all(checks), cfg.quick),
    }
    return result


# -- the report ----------------------------------------------------------------------------------
def _f(value: Any, pattern: str = "{:.0f}") -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and not math.isfinite(value))
        else (pattern.format(value))
    )


def print_report(result: dict[str, Any], echo: Echo) -> None:
    cfg = result["config"]
    echo("")
    echo("model (each link the same both ways; per source a path of its own):")
    for name in ("public", "access", "backbone"):
        s = cfg[name]
        echo(f"  {name:<9} {s['delay_ms']:g} ms one way ± {s['jitter_ms']:g} ms (sd), "
             f"{s['loss_pct']:g} % loss")  # fmt: skip
    echo(f"  in order: {not cfg['reorder']}, seed {cfg['seed']}, {cfg['callers']} callers at once")
    echo("")
    echo("emulator check (probes through a twin of each link, same run):")
    echo(f"  {'link':<22}{'set ms':>7}{'mean ms':>9}{'sd ms':>7}{'err %':>7}"
         f"{'set loss %':>11}{'loss % [95% CI]':>24}  verdict")  # fmt: skip
    for vname, v in result["variants"].items():
        for lname, link in v["links"].items():
            for d in ("up", "down"):
                m = link[d]
                lo, hi = m["loss_ci95_pct"]
                echo(
                    f"  {f'{vname}/{lname} {d}':<22}{link['settings']['delay_ms']:>7g}"
                    f"{_f(m['mean_delay_ms'], '{:.1f}'):>9}{_f(m['sd_delay_ms'], '{:.1f}'):>7}"
                    f"{_f(m['delay_error_pct'], '{:+.1f}'):>7}{link['settings']['loss_pct']:>11g}"
                    f"{_f(m['loss_pct'], '{:.3f}'):>8} [{lo:.3f}, {hi:.3f}] n={m['sent']:<6}"
                    f"  delay {'ok' if m['delay_ok'] else 'OFF'}, loss {m['loss_verdict']}"
                )
    echo("")
    head = f"  {'':<8}{'conn':>5}" + "".join(f"{m:>18}" for m in METRICS)
    echo("per variant, median / p90 over calls:")
    echo(head)
    for vname, v in result["variants"].items():
        s = v["summary"]
        cells = "".join(
            f"{_f(s[m]['median'], '{:.1f}') + ' / ' + _f(s[m]['p90'], '{:.1f}'):>18}"
            for m in METRICS
        )
        echo(f"  {vname:<8}{s['connected']:>2}/{s['calls']:<2}{cells}")
        for error in s["errors"]:
            echo(f"    error: {error}")
    if "ratios_edge_over_direct" in result:
        r = result["ratios_edge_over_direct"]
        echo("  EDGE/DIRECT (medians): " + ", ".join(f"{m} {_f(r[m], '{:.2f}')}" for m in METRICS))
    check_ = result["emulator_check"]
    echo(f"{check_['verdict']}: {check_['criterion']}")
    for note in result["notes"]:
        echo(f"note: {note}")


EXAMPLES = """
\b
Examples:
  rtcedge bench geo                          # both variants, 6 callers, 60 s windows
  rtcedge bench geo --public-loss-pct 5 --callers 8
  rtcedge bench geo --quick                  # smoke test: 2 callers, 4 s window
\b
Prints the model, a check of what the emulated links delivered, a table per variant and the
EDGE/DIRECT ratios; writes the JSON result; exits 0 whatever the figures are.
"""


def link_options(name: str, delay: float, jitter: float, loss: float, what: str):  # type: ignore[no-untyped-def]
    """--NAME-delay-ms, --NAME-jitter-ms, --NAME-loss-pct for one link."""

    def add(f):  # type: ignore[no-untyped-def]
        f = click.option(f"--{name}-loss-pct", type=click.FloatRange(0, 100), default=loss,
                         show_default=True, help=f"Loss of the {what}, % each way.")(f)  # fmt: skip
        f = click.option(f"--{name}-jitter-ms", type=click.FloatRange(min=0), default=jitter,
                         show_default=True,
                         help=f"Jitter of the {what}: sd of the one-way delay, ms.")(f)  # fmt: skip
        return click.option(f"--{name}-delay-ms", type=click.FloatRange(min=0), default=delay,
                            show_default=True,
                            help=f"One-way delay of the {what}, ms.")(f)  # fmt: skip

    return add


@click.command("geo", epilog=EXAMPLES)
@click.option("--callers", type=click.IntRange(1, 40), default=6, show_default=True,
              help="aiortc callers at once, per variant.")  # fmt: skip
@click.option("--seconds", type=click.FloatRange(min=2, max=240), default=60.0,
              show_default=True, help="Measured window per variant.")  # fmt: skip
@click.option("--variants", type=click.Choice(VARIANTS), multiple=True, default=VARIANTS,
              show_default=True, help="Which paths to run (repeatable).")  # fmt: skip
@link_options("public", 80.0, 15.0, 2.0, "public path (direct: caller to cluster relay)")
@link_options("access", 10.0, 2.0, 0.5, "access link (edge: caller to edge relay)")
@link_options("backbone", 60.0, 1.0, 0.01, "backbone (edge: edge relay to cluster relay)")
@click.option("--reorder/--in-order", default=False, show_default=True,
              help="Let jitter reorder datagrams (default: FIFO, as one queue).")  # fmt: skip
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seed of every link's random fates.")  # fmt: skip
@click.option("--probe-flows", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Probe flows per link checking what it delivers.")  # fmt: skip
@click.option("--probe-pps", type=click.FloatRange(1, 200), default=50.0, show_default=True,
              help="Datagrams per second of each probe flow (voice: 50).")  # fmt: skip
@out_option
@click.option("--quick", is_flag=True,
              help="2 callers, 4 s window: a smoke test, criterion not judged.")  # fmt: skip
def geo_bench(**opts: Any) -> None:
    """Callers far away: direct to the cluster vs via a near edge and a backbone."""

    def settings(name: str) -> LinkSettings:
        return LinkSettings(
            opts[f"{name}_delay_ms"], opts[f"{name}_jitter_ms"], opts[f"{name}_loss_pct"]
        )

    quick = opts["quick"]
    cfg = GeoConfig(
        callers=2 if quick else opts["callers"],
        window_s=4.0 if quick else opts["seconds"],
        settle_s=1.0 if quick else 3.0,
        stats_every_s=2.0 if quick else 5.0,
        public=settings("public"),
        access=settings("access"),
        backbone=settings("backbone"),
        reorder=opts["reorder"],
        seed=opts["seed"],
        probe_flows=opts["probe_flows"],
        probe_pps=opts["probe_pps"],
        variants=tuple(opts["variants"]),
        out_dir=opts["out_dir"],
        quick=quick,
    )
    run_and_report("geo", lambda: run(cfg), print_report, cfg.out_dir, geo_figure)


if __name__ == "__main__":
    geo_bench()
