"""The SiteFactor applier over the Redis port (``_ClientHints``): a VC that follows
arrival order and a hint this version cannot read leave jobs at the neutral factor, never
the worst, and never stop the pass; SiteFactors stay within what scontrol accepts."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence

import pytest

from gpuhint.cli.slurm_hints import _ClientHints
from gpuhint.kueue.hints import MemoryHints
from gpuhint.slurm.priority import MAX_SITE_FACTOR, FactorMap, PriorityApplier, SlurmJob
from gpuhint.slurm.settings import SlurmSettingsError, load_slurm_settings
from gpuhint.wire.contract import ARRIVAL_ORDER_REASON
from tests.cores.test_applier_hints import NOW, hint


class MemSlurm:
    def __init__(self, ids: Sequence[str]) -> None:
        self.factor = dict.fromkeys(ids, 0)

    def queue(self) -> list[SlurmJob]:
        return [SlurmJob(j, "PENDING", f) for j, f in self.factor.items()]

    def apply(self, lines: Sequence[str]) -> list[str]:
        for line in lines:
            ids, factor = line.removeprefix("update jobid=").split(" SiteFactor=")
            for j in ids.split(","):
                self.factor[j] = int(factor)
        return []


def _guarded_vc_and_one_model_hint() -> MemoryHints:
    hints = {f"b{i}": hint(f"b{i}", NOW - 1000 + i, first=ARRIVAL_ORDER_REASON) for i in range(3)}
    hints["a"] = hint("a", 8 * 3600.0)  # a model's hint: 8 GPU-hours
    return MemoryHints(hints)


def test_a_vc_in_arrival_order_gets_the_neutral_factor_not_the_worst() -> None:
    hints = _guarded_vc_and_one_model_hint()
    slurm = MemSlurm([*hints.hints, "unhinted"])
    r = PriorityApplier(slurm, _ClientHints(hints), "c", wall=lambda: NOW).run_pass()
    f = slurm.factor
    # the guarded VC's submit times (~1.8e9 "GPU-s") would have been factor 0 and the
    # median of the hinted jobs (the neutral) 0 with them
    assert r.neutral_factor == round(f["a"], -3) > 0  # the median, to 1% of the range
    assert f["b0"] == f["b1"] == f["b2"] == f["unhinted"] == r.neutral_factor
    assert r.hints_fresh  # the guarded VC's hints still say the worker is alive


def test_an_unreadable_hint_leaves_its_job_neutral_and_the_pass_goes_on() -> None:
    hints = MemoryHints({"small": hint("small", 60.0), "big": hint("big", 1e7)})
    hints.junk = ["gpuhint:v1:hint:c:new"]
    slurm = MemSlurm(["small", "big", "new"])
    r = PriorityApplier(slurm, _ClientHints(hints), "c", wall=lambda: NOW).run_pass()
    f = slurm.factor
    assert f["small"] > f["new"] == r.neutral_factor > f["big"]


def test_site_factor_stays_within_what_scontrol_accepts() -> None:
    with pytest.raises(ValueError):
        FactorMap(max_factor=2**31 - 1)
    assert FactorMap(max_factor=MAX_SITE_FACTOR).factor(0.0) == 2**31 - 4
    for bad in ({"max_factor": 2**31 - 1}, {"neutral": str(2**31 - 1)}):
        with pytest.raises(SlurmSettingsError):
            load_slurm_settings(**bad)


def test_the_apply_loop_survives_a_pass_that_fails_for_an_unexpected_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gpuhint.cli import slurm as cli_slurm

    stop = threading.Event()
    calls: list[int] = []
    errors: list[str] = []

    class Metrics:
        def error(self, kind: str) -> None:
            errors.append(kind)

    class Client:
        def last_change_id(self) -> str:
            return "0-0"

    class Failing:
        def run_pass(self) -> None:
            calls.append(1)
            if len(calls) == 3:
                stop.set()
            raise KeyError("a bug")

    args = argparse.Namespace(once=False, dry_run=False, json=False)
    with caplog.at_level("WARNING", logger="gpuhint.slurm"):
        cli_slurm._priority_passes(
            args, 0.01, "c", Client(), Failing(), Metrics(), lambda **_k: None, stop
        )
    assert len(calls) == 3 and errors == ["internal"] * 3
    assert sum(r.exc_info is not None for r in caplog.records) == 1  # the traceback once
