"""``rtcedge up`` runs its transceiver without the load gate unless told: a deployed
transceiver refuses new calls at 85 % of a core or a loop 20 ms late, which refused a busy
laptop's first call ("overloaded: event loop 21 ms late", issue 27). ``--admit-max-cpu`` and
``--admit-max-loop-lag`` (or their variables, which the transceiver, started without RTCEDGE_*,
would not see) set it. Real processes: ``up`` and its children read from /proc; a transceiver
with ``up``'s options whose own CPU and loop are loaded."""

from __future__ import annotations

from pathlib import Path

from rtcedge import cli
from rtcedge.checks import UpAdmission
from testbed.processes import RelayProcess
from tests.rtcedge.test_up_backend_url import free_addresses, transceiver_of_up
from tests.support.busy_transceiver import BusyTransceiverProcess
from tests.support.up import running_up
from tests.support.waits import run, wait_until
from tests.support.whip import make_offer, post
from transceiver.cli import main as transceiver_main


def option_values(pid: int) -> dict[str, str]:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\x00")
    return {
        flag: args[args.index(flag) + 1] for flag in ("--admit-max-cpu", "--admit-max-loop-lag")
    }


def test_ups_transceiver_has_no_load_gate_unless_told_even_by_the_environment(monkeypatch):
    monkeypatch.setenv("RTCEDGE_ADMIT_MAX_CPU", "85")  # a deployed transceiver's, told
    monkeypatch.delenv("RTCEDGE_ADMIT_MAX_LOOP_LAG", raising=False)
    with running_up(*free_addresses()):
        values = option_values(transceiver_of_up())
    assert values == {"--admit-max-cpu": "85", "--admit-max-loop-lag": "0"}, values


def test_ups_admission_options_are_the_transceivers_with_local_defaults():
    serve = transceiver_main.commands["serve"]
    theirs = {opt: param for param in serve.params for opt in param.opts}
    ours = {opt: param for param in cli.up.params for opt in param.opts}
    for flag in ("--admit-max-cpu", "--admit-max-loop-lag"):
        assert ours[flag].envvar == theirs[flag].envvar, flag
        assert ours[flag].default == 0 and float(theirs[flag].default) > 0, flag


def test_a_loaded_transceiver_with_ups_options_admits_a_call(tmp_path):
    """The same load that makes a transceiver with the deployed limits refuse
    (tests/transceiver/test_admission.py) leaves one with ``up``'s admitting."""
    relay = RelayProcess({}, workers=1)  # not started: its address is what answers advertise
    trx = BusyTransceiverProcess(
        relay, extra_args=UpAdmission().transceiver_options(), flag=tmp_path / "busy"
    )
    relay.transceivers = {0: trx.media_address}
    trx.start()
    try:

        async def go():
            trx.busy(True)
            cpu = "rtcedge_transceiver_cpu_ratio"
            assert await wait_until(lambda: trx.metric(cpu) >= 0.5, 20), "the load shows"
            status, text, _ = await post(trx.url, await make_offer())
            assert status == 201, text
            assert trx.metric("rtcedge_transceiver_overloaded") == 0

        run(go(), 60)
    finally:
        trx.busy(False)
        trx.stop()
