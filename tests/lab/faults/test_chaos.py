"""The fault suite, short version: real broker, real Redis, real ``gpuhint worker`` processes.

Each scenario's final Redis state (which hints exist, each one's priority) must equal the
uninterrupted in-process reference, every hostile message must be dead-lettered, and no
worker may crash. The long version with every scenario is ``python bench/chaos.py --json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuhint.lab.faults.chaos import Chaos, ScenarioResult
from gpuhint.lab.local.services import ServiceError
from gpuhint.lab.traces.readers import job_events, parse_time, read_trace

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[2] / "data" / "philly_excerpt.json"
CUT = "2017-10-08 00:00:00"


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chaos]:
    cut = parse_time(CUT)
    events = [e for e in job_events(read_trace(TRACE).jobs, cluster="philly") if e.time <= cut]
    c = Chaos(tmp_path_factory.mktemp("chaos"), events, "philly", log=print)
    try:
        c.__enter__()
    except ServiceError as exc:
        pytest.fail(f"the fault suite's servers could not be started: {exc}", pytrace=False)
    assert len(c.reference) > 10  # the cut leaves jobs pending: there is something to lose
    yield c
    c.__exit__(None, None, None)


def _assert_clean(res: ScenarioResult) -> None:
    assert res.ok, res.as_json()


def test_reference_run_matches_the_in_process_engine(chaos: Chaos) -> None:
    _assert_clean(chaos.run("reference", timeout_s=180))


def test_hostile_messages_interleaved_with_a_replay(chaos: Chaos) -> None:
    res = chaos.run("malformed_10000", timeout_s=240, bad=1000)
    assert res.bad_messages_sent == 1000
    _assert_clean(res)


def test_sigkill_of_the_worker_mid_stream(chaos: Chaos) -> None:
    res = chaos.run("sigkill_worker", timeout_s=240, kills=1)
    assert res.kills == 1, res.notes  # the worker was killed (else the run proves nothing)
    _assert_clean(res)


def test_a_kill_storm_with_kills_during_restore(chaos: Chaos) -> None:
    """The short kill storm: a backlog, one worker SIGKILLed four times (two of them
    while its successor restores the changelog), then two workers; every job's first
    and final priority equal the reference's."""
    res = chaos.run("kill_storm", timeout_s=240, seeds=(7,), workers=(1, 2), kills=4)
    assert res.runs == 2 and res.kills == 8
    _assert_clean(res)


def test_one_vc_with_25000_waiting_jobs_neither_crashes_nor_stops_the_others(
    tmp_path: Path,
) -> None:
    from gpuhint.lab.faults.chaos import big_vc_events, load_run

    with Chaos(tmp_path, big_vc_events(25_000), "chaos", log=print) as c:
        res = load_run(c, 300, "big_vc")
    assert res.worker_crashes == 0 and res.settled
    _assert_clean(res)  # every hint of both VCs, each with the reference's priority
    assert len(c.reference) > 25_000


def test_resent_events_change_no_priority(chaos: Chaos) -> None:
    """1% of the events sent twice (a producer's retry: new records): every first and
    final priority as in the reference, which saw each event once."""
    _assert_clean(chaos.run("duplicates_1pct", timeout_s=180, share=0.01))
