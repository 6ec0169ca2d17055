from __future__ import annotations

import random

from models.fifo_guard import FifoGuard, _same_without_queue
from models.simulator import SimJob, simulate_vc


def _jct(jobs: list[SimJob], out: list) -> float:  # type: ignore[type-arg]
    return sum(o.end - j.submit for o, j in zip(out, jobs, strict=True))


def test_no_fifo_queue_means_qssf_gives_the_same_schedule() -> None:
    """The guard skips its QSSF replay only where QSSF cannot differ from FIFO: checked
    against the full replay on random windows, light and heavy, with random priorities
    and same-second arrivals."""
    rng = random.Random(7)
    skipped = full = 0
    for case in range(400):
        nodes = rng.randint(1, 4)
        load = rng.choice((0.05, 0.3, 1.0))
        t = 0.0
        jobs = []
        for k in range(rng.randint(2, 40)):
            t += 0.0 if rng.random() < 0.2 else rng.expovariate(load)
            jobs.append(SimJob(str(k), round(t), rng.randint(1, 30), rng.choice((1, 2, 4, 8))))
        prios = [rng.random() for _ in jobs]
        fifo = simulate_vc(jobs, nodes, "fifo")
        qssf = simulate_vc(jobs, nodes, "qssf", priorities=prios)
        if _same_without_queue(jobs, fifo):
            skipped += 1
            assert [(o.start, o.end) for o in qssf] == [(o.start, o.end) for o in fifo], case
            assert _jct(jobs, qssf) == _jct(jobs, fifo)
        else:
            full += 1
    assert skipped > 30 and full > 30  # both branches exercised


def test_a_guard_pickled_before_the_skip_counter_restores() -> None:
    import pickle

    from models.fifo_guard import FifoGuard

    g = FifoGuard()
    state = dict(g.__dict__)
    del state["skipped"]  # what a guard of an older VcState holds
    old = FifoGuard.__new__(FifoGuard)
    old.__setstate__(state)
    back = pickle.loads(pickle.dumps(old))
    assert back.skipped == 0 and back.window == g.window


def test_forget_drops_a_job_without_a_duration_and_drains_behind_it() -> None:
    """A job cancelled while it waited never gets a duration: forgetting it lets the
    jobs submitted after it reach the replay and FIFO's shadow."""
    g = FifoGuard(window=64, every=16, min_jobs=16)
    g.submit("c", priority=1.0, submit_time=0.0, gpus=8)
    for k in range(32):
        g.submit(str(k), priority=float(k), submit_time=1.0 + k, gpus=8)
        g.observe(str(k), duration=100.0, running_gpus=8)
    assert g.shadow.jobs == 0 and len(g.recent) == 0 and g.checks == 0  # held behind c
    assert g.forget("c") is False  # no state change: hints rank as FIFO here
    assert list(g.open) == [] and g.shadow.jobs == 32 and len(g.recent) == 32
    assert g.checks == 1 and g.shadow.max_wait > 0
    assert g.forget("c") is False and g.forget("unknown") is False


def test_forget_reports_a_switch_as_observe_does() -> None:
    g = FifoGuard(window=64, every=16, min_jobs=32)
    g.submit("c", priority=0.0, submit_time=0.0, gpus=8)
    for k in range(64):  # hints that rank exactly backwards: longest first
        g.submit(str(k), priority=-k, submit_time=1.0 + k, gpus=8)
        assert g.observe(str(k), duration=10.0 * k, running_gpus=8) is False
    assert g.forget("c") is True and g.fallback
