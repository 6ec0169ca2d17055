"""The simulator with a live ranker in the loop (closed-loop QSSF)."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from models.simulator import SimJob, simulate_vc


class StaticRanker:
    """Gives fixed priorities and never re-ranks: must equal ``priorities=``."""

    def __init__(self, prios: list[float]) -> None:
        self.prios = prios
        self.calls: list[tuple[str, int, float]] = []

    def submit(self, i: int, t: float) -> float:
        self.calls.append(("submit", i, t))
        return self.prios[i]

    def start(self, i: int, t: float) -> None:
        self.calls.append(("start", i, t))

    def finish(self, i: int, t: float) -> Iterable[tuple[int, float]]:
        self.calls.append(("finish", i, t))
        return ()


def _random_jobs(rnd: random.Random, n: int) -> list[SimJob]:
    return [
        SimJob(str(k), float(rnd.randrange(0, 400)), float(rnd.randrange(1, 120)), g)
        for k, g in enumerate(rnd.choice([1, 2, 4, 8, 16]) for _ in range(n))
    ]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("backfill", [False, True])
def test_a_ranker_that_never_moves_gives_the_static_schedule(seed: int, backfill: bool) -> None:
    rnd = random.Random(seed)
    jobs = _random_jobs(rnd, 80)
    prios = [rnd.random() * 100 for _ in jobs]
    static = simulate_vc(jobs, 3, "qssf", priorities=prios, backfill=backfill)
    r = StaticRanker(prios)
    loop = simulate_vc(jobs, 3, "qssf", ranker=r, backfill=backfill)
    assert loop == static
    # every job: submitted at its submit, started at its start, finished at its end
    seen = {(kind, i): t for kind, i, t in r.calls}
    for i, (j, o) in enumerate(zip(jobs, static, strict=True)):
        assert seen[("submit", i)] == j.submit
        assert seen[("start", i)] == o.start
        assert seen[("finish", i)] == o.end


def test_a_re_ranked_waiting_job_overtakes() -> None:
    # one 8-GPU node: "a" runs; "b" (long-looking) and "c" wait; when "a" ends the ranker
    # learns that "b" is short and moves it ahead of "c".
    jobs = [SimJob("a", 0, 10, 8), SimJob("b", 1, 5, 8), SimJob("c", 2, 5, 8)]

    class Learner(StaticRanker):
        def finish(self, i: int, t: float) -> Iterable[tuple[int, float]]:
            super().finish(i, t)
            return [(1, 1.0)] if i == 0 else [(2, 0.5)]  # the second update is too late

    static = simulate_vc(jobs, 1, "qssf", priorities=[0.0, 100.0, 50.0])
    assert [o.start for o in static] == [0, 15, 10]
    moved = simulate_vc(jobs, 1, "qssf", ranker=Learner([0.0, 100.0, 50.0]))
    assert [o.start for o in moved] == [0, 10, 15]


def test_qssf_needs_priorities_or_a_ranker() -> None:
    with pytest.raises(ValueError, match="or a ranker"):
        simulate_vc([SimJob("a", 0, 1, 1)], 1, "qssf")
