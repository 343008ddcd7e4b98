"""Run one fuzz target (or all of them, one after another) for a bounded time or number of runs.

    python -m fuzz.run stun --seconds 60
    python -m fuzz.run media_socket --runs 1000000
    python -m fuzz.run all --seconds 60          # what CI does
    python -m fuzz.run --list

Each run gets a fresh temporary directory: new corpus inputs (unless ``--corpus`` names a
directory to keep them), crash files and the observation log. The committed seeds in
``fuzz/corpus/<target>`` are read, never written. At the end the runner prints executions,
exec/s and wall time, any crash file with the command that replays it, and the observations.

Exit status: 0 clean; 1 a finding (crash, timeout, out of memory, or the harness died);
2 bad usage; 3 observations recorded while ``--fail-on-observation`` was given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fuzz.harness import OBSERVATIONS_ENV

ROOT = Path(__file__).resolve().parent.parent
FUZZ_DIR = ROOT / "fuzz"
GRACE_S = 120
"""How long past ``--seconds`` a run may take (start-up, slow last input) before it is killed."""
ARTIFACT_PREFIXES = ("crash-", "timeout-", "oom-", "leak-")


@dataclass(frozen=True)
class Target:
    module: str
    max_len: int
    about: str
    dictionary: str | None = None


TARGETS: dict[str, Target] = {
    "stun": Target("fuzz.fuzz_stun", 2048, "common.stun parser and readers", "stun.dict"),
    "hint": Target("fuzz.fuzz_hint", 256, "common.hint verifier, cache, sign/verify round trip"),
    "encap": Target("fuzz.fuzz_encap", 512, "common.encap decoders, encode/decode round trips"),
    "demux": Target("fuzz.fuzz_demux", 4096, "transceiver.socket.demux.Demux as a plain object"),
    "framing": Target("fuzz.fuzz_framing", 4096, "relay.framing RFC 4571 decoder, split reads"),
    "media_socket": Target(
        "fuzz.fuzz_media_socket", 4096, "transceiver.socket.media.MediaSocket and its Classifier"
    ),
    "aioice": Target(
        "fuzz.fuzz_aioice", 2048, "aioice STUN parser behind common.stun (observes)", "stun.dict"
    ),
}
SELFTEST = Target("fuzz.fuzz_selftest", 64, "the runner's own test: crashes on b'crash'")
"""Not part of ``all``: tests/fuzz uses it to prove that a finding fails the run."""


@dataclass
class Result:
    target: str
    status: int
    executions: int | None
    exec_per_s: int | None
    wall_s: float
    new_inputs: int | None
    artifacts: list[Path]
    observations: list[dict]
    workdir: Path


def _stat(log: str, name: str) -> int | None:
    found = re.findall(rf"stat::{name}:\s+(\d+)", log)
    return int(found[-1]) if found else None


def _executions(log: str) -> int | None:
    done = re.findall(r"Done (\d+) (?:runs )?in", log)
    if done:
        return int(done[-1])
    units = _stat(log, "number_of_executed_units")
    if units is not None:
        return units
    progress = re.findall(r"^#(\d+)\s", log, re.MULTILINE)
    return int(progress[-1]) if progress else None


def run_target(name: str, target: Target, args: argparse.Namespace) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix=f"rtcedge-fuzz-{name}-"))
    corpus = Path(args.corpus) if args.corpus else workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts = workdir / "artifacts"
    artifacts.mkdir()
    observations = workdir / "observations.jsonl"
    seeds = FUZZ_DIR / "corpus" / name

    cmd = [
        sys.executable,
        "-m",
        target.module,
        f"-artifact_prefix={artifacts}/",
        f"-max_len={args.max_len or target.max_len}",
        f"-timeout={args.timeout}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        "-print_final_stats=1",
    ]
    if args.seconds:
        cmd.append(f"-max_total_time={args.seconds}")
    if args.runs:
        cmd.append(f"-runs={args.runs}")
    if args.seed is not None:
        cmd.append(f"-seed={args.seed}")
    if target.dictionary:
        cmd.append(f"-dict={FUZZ_DIR / 'dicts' / target.dictionary}")
    cmd += args.libfuzzer_args
    cmd.append(str(corpus))
    if seeds.is_dir() and not args.no_seeds:
        cmd.append(str(seeds))

    env = dict(os.environ)
    env[OBSERVATIONS_ENV] = str(observations)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    print(f"== fuzz {name}: {target.about}", flush=True)
    print("   " + " ".join(cmd), flush=True)

    log_path = workdir / "fuzz.log"
    deadline = time.monotonic() + (args.seconds + GRACE_S if args.seconds else float("inf"))
    started = time.monotonic()
    killed = False
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if args.verbose or not re.match(r"#\d+\s+(NEW|REDUCE)|INFO: Instrumenting", line):
                print("   " + line, end="", flush=True)
            if time.monotonic() > deadline:
                proc.kill()
                killed = True
                break
        status = proc.wait()
    wall_s = time.monotonic() - started
    text = log_path.read_text(encoding="utf-8", errors="replace")

    found = sorted(p for p in artifacts.iterdir() if p.name.startswith(ARTIFACT_PREFIXES))
    recorded = []
    if observations.exists():
        recorded = [json.loads(line) for line in observations.read_text().splitlines() if line]
    if killed:
        print(f"!! killed after {wall_s:.0f} s: the run overran its bound", flush=True)
    executions = _executions(text)
    rate = _stat(text, "average_exec_per_sec")
    if rate is None and executions and wall_s:
        rate = int(executions / wall_s)
    result = Result(
        name,
        1 if (status != 0 or found or killed) else 0,
        executions,
        rate,
        wall_s,
        _stat(text, "new_units_added"),
        found,
        recorded,
        workdir,
    )
    if result.status == 0 and recorded and args.fail_on_observation:
        result.status = 3
    report(result, target)
    if result.status == 0 and not args.keep and not args.corpus:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def report(result: Result, target: Target) -> None:
    for path in result.artifacts:
        data = path.read_bytes()
        print(f"!! FINDING {path}", flush=True)
        print(f"   input ({len(data)} bytes): {data.hex()}", flush=True)
        print(f"   replay: python -m {target.module} {path}", flush=True)
    explained = set()
    for entry in result.observations:
        # Not "!!": an observation is a tolerated surprise the target keeps a list of, not a
        # failure; it fails the run only with --fail-on-observation.
        why = entry.get("why") if entry["kind"] not in explained else None
        explained.add(entry["kind"])
        print(
            f"   observation (expected, not a failure) {entry['kind']}: {entry['exception']}: "
            f"{entry['message']} (at {entry['raised_at']})"
            + (f"\n   why it is harmless: {why}" if why else "")
            + f"\n   input: {entry['input_hex']}"
            + (f"\n   step: {entry['context']}" if entry.get("context") else ""),
            flush=True,
        )
    verdict = {0: "no finding", 1: "FINDING", 3: "observations (failing as asked)"}
    print(
        f"== fuzz {result.target}: {result.executions if result.executions is not None else '?'}"
        f" executions in {result.wall_s:.1f} s ({result.exec_per_s or '?'} exec/s),"
        f" {result.new_inputs if result.new_inputs is not None else '?'} new corpus inputs,"
        f" {len(result.observations)} observations: {verdict[result.status]}"
        + ("" if result.status == 0 else f"; kept {result.workdir}"),
        flush=True,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n")[0])
    parser.add_argument("target", nargs="?", help="a target name, or 'all'")
    parser.add_argument("--list", action="store_true", help="list the targets")
    parser.add_argument("--seconds", type=int, default=0, help="-max_total_time (0: no limit)")
    parser.add_argument("--runs", type=int, default=0, help="-runs, executions (0: no limit)")
    parser.add_argument("--corpus", help="keep new inputs in this directory (longer campaigns)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--seed", type=int, help="libFuzzer -seed, to repeat a run")
    parser.add_argument("--max-len", type=int, default=0, help="override the target's -max_len")
    parser.add_argument("--timeout", type=int, default=25, help="seconds one input may take")
    parser.add_argument("--rss-limit-mb", type=int, default=2048)
    parser.add_argument("--no-seeds", action="store_true", help="do not read fuzz/corpus/<t>")
    parser.add_argument("--fail-on-observation", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="echo every libFuzzer line")
    parser.add_argument(
        "libfuzzer_args", nargs="*", help="after '--': passed to libFuzzer as they are"
    )
    args = parser.parse_args(argv)
    if args.list:
        return args
    if not args.target:
        parser.error("a target is required (or --list)")
    if not args.seconds and not args.runs:
        parser.error("give --seconds or --runs: every run must be bounded")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.list:
        for name, target in TARGETS.items():
            print(f"{name:14} {target.about}")
        return 0
    if args.target == "all":
        chosen = list(TARGETS.items())
    elif args.target in TARGETS:
        chosen = [(args.target, TARGETS[args.target])]
    elif args.target == "selftest":
        chosen = [("selftest", SELFTEST)]
    else:
        print(f"unknown target {args.target!r}; try --list", file=sys.stderr)
        return 2
    results = [run_target(name, target, args) for name, target in chosen]
    if len(results) > 1:
        print("== summary")
        for r in results:
            print(
                f"   {r.target:14} {r.executions or 0:>12} executions {r.wall_s:8.1f} s"
                f" {r.exec_per_s or 0:>8} exec/s  status {r.status}"
            )
    return max(r.status for r in results)


if __name__ == "__main__":
    sys.exit(main())
