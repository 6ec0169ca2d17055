"""EASY backfill with requested time limits (models/simulator/easy.py)."""

from __future__ import annotations

import random

import pytest

from models.simulator import SimJob, simulate_vc
from models.simulator.easy import simulate_easy


def _random_jobs(seed: int, n: int = 60) -> list[SimJob]:
    rnd = random.Random(seed)
    t = 0.0
    jobs = []
    for k in range(n):
        t += rnd.expovariate(1 / 30)
        jobs.append(
            SimJob(str(k), round(t), rnd.choice([5, 60, 300, 900]), rnd.choice([1, 2, 4, 8, 16]))
        )
    return jobs


def test_a_job_without_a_limit_gets_the_largest_one() -> None:
    # a (8 GPUs, no limit -> b's 1000) runs; head b (16) is reserved at 1000; c (8 GPUs,
    # limit 300) ends by then and backfills; d (8 GPUs, no limit -> 1000) does not
    jobs = [SimJob("a", 0, 50, 8), SimJob("b", 1, 10, 16), SimJob("c", 2, 30, 8)]
    jobs.append(SimJob("d", 3, 30, 8))
    out = simulate_easy(jobs, 2, [j.submit for j in jobs], [None, 1000, 300, None])
    assert out[2].start == 2 and out[1].start == 50 and out[3].start == 60


@pytest.mark.parametrize("seed", range(8))
def test_exact_limits_never_delay_the_head_on_one_node(seed: int) -> None:
    # one node, jobs of at most 8 GPUs: GPU counts are the whole story (no fragmentation
    # across nodes), so with exact limits a backfilled job never delays the reserved head:
    # every job starts no later than its FIFO start would allow given the jobs ahead.
    jobs = [SimJob(j.job_id, j.submit, j.duration, min(j.gpus, 8)) for j in _random_jobs(seed)]
    exact = [j.duration for j in jobs]
    easy = simulate_easy(jobs, 1, [j.submit for j in jobs], exact)
    fifo = simulate_vc(jobs, 1, "fifo")
    assert sum(o.end - j.submit for o, j in zip(easy, jobs, strict=True)) <= sum(
        o.end - j.submit for o, j in zip(fifo, jobs, strict=True)
    )
    # no job runs on more GPUs than the node has, at any start
    for o in easy:
        busy = sum(j.gpus for e, j in zip(easy, jobs, strict=True) if e.start <= o.start < e.end)
        assert busy <= 8


def test_extra_gpus_backfill_a_long_job() -> None:
    # 2 nodes: a (8 GPUs, limit 100) runs; head b needs 16 -> shadow 100, extra 0 ...
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 16), SimJob("c", 2, 500, 8)]
    out = simulate_easy(jobs, 2, [0, 1, 2], [100, 10, 500])
    assert out[2].start > 100  # c (8 GPUs, 500 s) would delay b: it waits
    # ... but with b needing only 8 GPUs at the shadow time, 8 are extra: c backfills
    jobs[1] = SimJob("b", 1, 10, 8)
    jobs.append(SimJob("d", 1.5, 10, 16))
    out = simulate_easy(jobs, 2, [0, 1, 2, 1.5], [100, 10, 500, 10])
    assert out[1].start == 1  # b fits at once
    assert out[2].start > 2  # d (16 GPUs) is the head; c would delay it


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="one key and one limit"):
        simulate_easy([SimJob("a", 0, 1, 1)], 1, [], [])
    with pytest.raises(ValueError, match="GPUs"):
        simulate_easy([SimJob("a", 0, 1, 9)], 1, [0], [1])


class _Fixed:
    """A ranker that gives fixed keys and, once, moves one waiting job to the front."""

    def __init__(self, keys: list[float], promote: tuple[int, int] | None = None) -> None:
        self.keys, self.promote = keys, promote
        self.started: list[int] = []
        self.submitted: list[int] = []

    def submit(self, i: int, t: float) -> float:
        self.submitted.append(i)
        return self.keys[i]

    def start(self, i: int, t: float) -> None:
        self.started.append(i)

    def finish(self, i: int, t: float) -> list[tuple[int, float]]:
        if self.promote is not None and i == self.promote[0]:
            return [(self.promote[1], -1.0)]
        return []


@pytest.mark.parametrize("seed", range(6))
def test_a_fixed_ranker_gives_the_fixed_keys_schedule(seed: int) -> None:
    jobs = _random_jobs(seed)
    rnd = random.Random(seed)
    keys = [rnd.random() for _ in jobs]
    limits = [j.duration * rnd.choice([1.0, 2.0]) for j in jobs]
    ranker = _Fixed(keys)
    looped = simulate_easy(jobs, 2, None, None, ranker=ranker, run_time=lambda i: limits[i])
    assert looped == simulate_easy(jobs, 2, keys, limits)
    assert sorted(ranker.started) == sorted(ranker.submitted) == list(range(len(jobs)))


def test_a_reranked_job_takes_the_head_and_its_reservation() -> None:
    # one node: a runs; b (4 GPUs) and c (8 GPUs) wait behind it, b ranked first; when a
    # ends the ranker moves c to the front: c starts at a's end, b after c
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 4), SimJob("c", 2, 10, 8)]
    keys = [0.0, 1.0, 2.0]
    out = simulate_easy(jobs, 1, None, None, ranker=_Fixed(keys), run_time=lambda i: 10.0)
    assert (out[1].start, out[2].start) == (100, 110)
    out = simulate_easy(
        jobs, 1, None, None, ranker=_Fixed(keys, promote=(0, 2)), run_time=lambda i: 10.0
    )
    assert (out[2].start, out[1].start) == (100, 110)


def test_a_job_of_unknown_run_time_only_uses_extra_gpus() -> None:
    # 2 nodes: a (8 GPUs) runs; head b needs 16 -> reserved at a's end; c (8 GPUs) has no
    # run time known: it cannot promise to end in time and there are no extra GPUs
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 16), SimJob("c", 2, 5, 8)]
    run = {0: 100.0, 1: 10.0, 2: None}
    out = simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]), run_time=run.get)
    assert out[2].start == 110
    run[2] = 5.0
    out = simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]), run_time=run.get)
    assert out[2].start == 2
    with pytest.raises(ValueError, match="run_time"):
        simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]))


def test_a_job_outliving_its_predicted_run_time_is_expected_to_run_twice_as_long() -> None:
    # 2 nodes: a (8 GPUs, predicted 40 s, really 100 s) runs; head b needs 16 GPUs. At 50
    # a outlived its prediction: expected to end at 80 (run time doubled), so c (8 GPUs,
    # predicted 30 s) ends in time and backfills. A time limit instead means a is killed
    # at its limit: counted as ending now, c would delay b and waits.
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 16), SimJob("c", 50, 30, 8)]
    run = [40.0, 10.0, 30.0]
    out = simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]), run_time=run.__getitem__)
    assert out[2].start == 50 and out[1].start == 100
    assert simulate_easy(jobs, 2, [0, 1, 2], run)[2].start > 50


def test_the_two_modes_do_not_mix_and_a_nan_priority_is_refused() -> None:
    jobs = [SimJob("a", 0, 10, 8), SimJob("b", 1, 10, 8)]
    with pytest.raises(ValueError, match="not both"):
        simulate_easy(jobs, 1, [0, 1], [10, 10], ranker=_Fixed([0, 1]), run_time=lambda i: 1.0)
    with pytest.raises(ValueError, match="goes with a ranker"):
        simulate_easy(jobs, 1, [0, 1], [10, 10], run_time=lambda i: 1.0)
    with pytest.raises(ValueError, match="NaN priority"):
        simulate_easy(jobs, 1, None, None, ranker=_Fixed([0, float("nan")]), run_time=lambda i: 1.0)


def test_a_ranked_queue_can_reserve_on_the_requested_limits() -> None:
    """A ranker with ``limits`` (a site's backfill under gpuhint's order): a job without a
    limit is assumed to run the largest one given, as in the unranked mode."""
    # 1 node: a (4 GPUs, 100 s) runs; head b needs all 8; c (4 GPUs, 20 s) may use the
    # free 4 only if its limit ends it by a's (the reservation): its limit decides
    jobs = [SimJob("a", 0, 100, 4), SimJob("b", 1, 10, 8), SimJob("c", 2, 20, 4)]
    fits = simulate_easy(jobs, 1, None, [100, 10, 30], ranker=_Fixed([0, 1, 2]))
    assert fits[2].start == 2 and fits[1].start == 100  # backfilled, b not delayed
    late = simulate_easy(jobs, 1, None, [100, 10, 300], ranker=_Fixed([0, 1, 2]))
    assert late[2].start > 2  # would end after a's limit: it waits
    missing = simulate_easy(jobs, 1, None, [None, 10, 3000], ranker=_Fixed([0, 1, 2]))
    unranked = simulate_easy(jobs, 1, [0, 1, 2], [3000, 10, 3000])
    assert missing == unranked  # a's missing limit is the largest given: 3000
    with pytest.raises(ValueError, match="run_time or limits"):
        simulate_easy(jobs, 1, None, None, ranker=_Fixed([0, 1, 2]))


def test_a_job_past_its_requested_limit_counts_as_ending_now_ranked_or_not() -> None:
    """A requested limit is not a prediction to grow: a job running past it (a TIMEOUT's
    grace) is expected to end now, as in the unranked mode; only predicted run times
    (``run_time``) double when a job outlives them (review, 2026-12-07)."""
    # a asked for 50 s and runs 100; at 61 the head b (8 GPUs) is reserved for "now",
    # so c (4 GPUs, limit 30) may not backfill; grown, a's end (100) would let it
    jobs = [SimJob("a", 0, 100, 4), SimJob("b", 60, 10, 8), SimJob("c", 61, 20, 4)]
    limits: list[float | None] = [50, 10, 30]
    unranked = simulate_easy(jobs, 1, [0, 1, 2], limits)
    ranked = simulate_easy(jobs, 1, None, limits, ranker=_Fixed([0, 1, 2]))
    assert ranked == unranked
    assert ranked[2].start == 110  # after b, not backfilled at 61
    grown = simulate_easy(
        jobs, 1, None, None, ranker=_Fixed([0, 1, 2]), run_time=limits.__getitem__
    )
    assert grown[2].start == 61  # a prediction a job outlives is doubled: c fits by it
    with pytest.raises(ValueError, match="not both"):
        simulate_easy(jobs, 1, None, [1, 1, 1], ranker=_Fixed([0, 1, 2]), run_time=lambda i: 1.0)


def test_an_unknown_or_zero_run_time_is_safe() -> None:
    # 2 nodes: a (8 GPUs, 100 s) runs; head b needs 16; c (8 GPUs, 50 s) arrives at 2.
    # A NaN run time is unknown: c can never promise to end in time, it waits for b. A 0 s
    # one counts as 1 s, doubled while outlived: a's expected end stays ahead of now, c
    # (predicted 0 s) backfills, and the head still starts when a really ends.
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 16), SimJob("c", 2, 50, 8)]
    nan = [float("nan")] * 3
    out = simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]), run_time=nan.__getitem__)
    assert (out[1].start, out[2].start) == (100, 110)
    zero = [0.0] * 3
    out = simulate_easy(jobs, 2, None, None, ranker=_Fixed([0, 1, 2]), run_time=zero.__getitem__)
    assert (out[1].start, out[2].start) == (100, 2)
