"""The event-driven simulator: hand-computed schedules, and a 1-second stepper twin.

The stepper below re-implements the Helios artifact's loop (``policies/fifo.py``,
``sjf.py``, ``qssf.py``, ``srtf.py`` and ``placer/consolidate.py``) literally, one second
at a time, with its own list-based placement; random small workloads must give the
same start and end times as the event-driven engine.
"""

from __future__ import annotations

import math
import random

import pytest

from models.simulator import (
    Nodes,
    SimJob,
    ckpt_overhead,
    percentile,
    simulate_vc,
    size_vcs,
    summarize,
)
from models.simulator.metrics import BSLD_BOUND_S, tail_stats


def jcts(jobs: list[SimJob], out: list) -> list[float]:  # type: ignore[type-arg]
    return [o.end - j.submit for j, o in zip(jobs, out, strict=True)]


# --- placement -------------------------------------------------------------------------


def test_small_jobs_go_to_the_fullest_node_that_fits() -> None:
    nodes = Nodes(2)
    assert nodes.place(3) == [(0, 3)]
    assert nodes.place(4) == [(0, 4)]  # node 0 (5 free) is fuller than node 1 (8 free)
    assert nodes.place(2) == [(1, 2)]  # node 0 has 1 free: does not fit
    assert nodes.place(1) == [(0, 1)]  # node 0 (1 free) is the fullest that fits
    assert nodes.free == [0, 6]
    nodes.release([(0, 3)])
    assert nodes.place(3) == [(0, 3)]  # ties and refills: fullest first again


def test_multiple_of_eight_takes_whole_free_nodes_lowest_first() -> None:
    nodes = Nodes(3)
    nodes.place(1)  # node 0 partly used
    assert nodes.place(16) == [(1, 8), (2, 8)]
    assert nodes.can_place(8) is False
    assert nodes.place(8) is None


def test_odd_large_job_puts_its_remainder_on_the_emptiest_node() -> None:
    nodes = Nodes(3)
    nodes.place(3)  # node 0: 5 free
    # one whole node (1), remainder on the next node by free GPUs: node 2 is whole
    assert nodes.place(12) == [(1, 8), (2, 4)]
    nodes = Nodes(2)
    nodes.place(3)  # node 0: 5 free, node 1 whole
    assert nodes.can_place(14) is False  # remainder 6 > 5
    assert nodes.place(13) == [(1, 8), (0, 5)]


def test_release_of_more_than_a_node_holds_is_an_error() -> None:
    nodes = Nodes(1)
    with pytest.raises(ValueError):
        nodes.release([(0, 1)])


# --- policies on hand-made workloads ---------------------------------------------------


def test_fifo_and_sjf_orders() -> None:
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 10, 8), SimJob("c", 2, 1, 8)]
    fifo = simulate_vc(jobs, 1, "fifo")
    assert [(o.start, o.end) for o in fifo] == [(0, 100), (100, 110), (110, 111)]
    assert jcts(jobs, fifo) == [100, 109, 109]
    sjf = simulate_vc(jobs, 1, "sjf")
    assert [(o.start, o.end) for o in sjf] == [(0, 100), (101, 111), (100, 101)]
    assert [o.queue for o in sjf] == [0, 100, 98]


def test_sjf_ranks_by_duration_alone_and_qssf_by_service() -> None:
    # b: short but wide (8 GPUs x 50 s = 400), c: longer but narrow (1 GPU x 100 s = 100)
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 1, 50, 8), SimJob("c", 2, 100, 1)]
    sjf = simulate_vc(jobs, 1, "sjf")
    assert sjf[1].start == 100 and sjf[2].start == 150
    oracle = simulate_vc(jobs, 1, "qssf", priorities=[j.service for j in jobs])
    assert oracle[2].start == 100 and oracle[1].start == 100 + 100  # c first, b waits for it


def test_head_of_line_blocking_and_backfill() -> None:
    jobs = [SimJob("a", 0, 100, 1), SimJob("b", 1, 50, 16), SimJob("c", 2, 10, 1)]
    plain = simulate_vc(jobs, 2, "fifo")
    assert [o.start for o in plain] == [0, 100, 150]  # c waits behind b
    bf = simulate_vc(jobs, 2, "fifo", backfill=True)
    assert [o.start for o in bf] == [0, 100, 2]  # c jumps in, b still starts at 100


def test_multi_node_job_needs_whole_nodes() -> None:
    # 2 nodes; a 1-GPU job on each node leaves 14 GPUs free but no whole node.
    jobs = [
        SimJob("a", 0, 100, 8),
        SimJob("b", 0, 30, 1),
        SimJob("c", 1, 10, 8),  # waits for a whole node
    ]
    out = simulate_vc(jobs, 2, "fifo")
    # b goes to node 1 (a fills node 0), so c needs node 1 whole: after b ends at 30
    assert out[2].start == 30 and out[2].end == 40


def test_qssf_orders_fresh_jobs_by_gpus_like_the_artifact() -> None:
    jobs = [SimJob("x", 0, 1000, 2), SimJob("y", 0, 10, 8)]
    prios = [2000.0, 80.0]
    quirk = simulate_vc(jobs, 1, "qssf", priorities=prios)
    assert [o.start for o in quirk] == [0, 1000]  # only fresh jobs: fewer GPUs first
    plain = simulate_vc(jobs, 1, "qssf", priorities=prios, new_jobs_by_gpus=False)
    assert [o.start for o in plain] == [10, 0]
    # Once a job has waited, priorities rule: z (prio 1) jumps w (prio 5).
    jobs = [SimJob("a", 0, 100, 8), SimJob("w", 1, 10, 8), SimJob("z", 2, 10, 8)]
    out = simulate_vc(jobs, 1, "qssf", priorities=[1.0, 5.0, 1.0])
    assert [o.start for o in out] == [0, 110, 100]


def test_srtf_preempts_with_checkpoint_cost_and_one_tick_per_segment() -> None:
    jobs = [SimJob("a", 0, 100, 8), SimJob("b", 10, 20, 8)]
    out = simulate_vc(jobs, 1, "srtf")
    # t=10: a has 90 s left > b's 20 -> a is preempted (+30 s), b runs 10..31
    assert (out[1].start, out[1].end, out[1].queue) == (10, 31, 0)
    # a resumes at 31 with 90 + 30 left and ends one tick after: 31 + 120 + 1
    assert (out[0].start, out[0].end, out[0].queue, out[0].preemptions) == (0, 152, 21, 1)
    exact = simulate_vc(jobs, 1, "srtf", tick=0)
    assert exact[1].end == 30 and exact[0].end == 30 + 120
    assert ckpt_overhead(1) == 7 and ckpt_overhead(8) == 30 and ckpt_overhead(16) == 60


def test_srtf_skips_queued_jobs_that_do_not_fit_the_quota() -> None:
    # 2 nodes: a (8 GPUs, long) runs; b (16 GPUs) would need a's node; c (8) fits beside a.
    jobs = [SimJob("a", 0, 1000, 8), SimJob("b", 1, 500, 16), SimJob("c", 2, 600, 8)]
    out = simulate_vc(jobs, 2, "srtf", tick=0)
    # t=1: b (500) < a (999): quota 16 goes to b, a is preempted; b runs 1..501
    assert out[1].start == 1 and out[1].end == 501
    # t=501: c (600) < a (999 + 30): both fit, both run
    assert out[2].start == 501 and out[0].end == 501 + 1029


def test_jobs_that_cannot_fit_are_refused() -> None:
    with pytest.raises(ValueError, match="could never run"):
        simulate_vc([SimJob("big", 0, 1, 24)], 2, "fifo")
    with pytest.raises(ValueError, match="GPU jobs only"):
        simulate_vc([SimJob("cpu", 0, 1, 0)], 2, "fifo")
    with pytest.raises(ValueError, match="one priority per job"):
        simulate_vc([SimJob("a", 0, 1, 1)], 1, "qssf")
    with pytest.raises(ValueError, match="unknown policy"):
        simulate_vc([SimJob("a", 0, 1, 1)], 1, "lifo")  # type: ignore[arg-type]


# --- the artifact's loop, one second at a time ------------------------------------------


class _Node:
    def __init__(self, name: int) -> None:
        self.name = name
        self.free = 8


def _artifact_place(nodes: list[_Node], g: int) -> list[tuple[int, int]] | None:
    """``ConsolidatePlacement.place`` transcribed (lists, stable sorts)."""
    if sum(n.free for n in nodes) < g:
        return None
    avail = [n for n in nodes if n.free > 0]
    chosen: list[tuple[_Node, int]] = []
    ok = False
    if g <= 8:
        for n in sorted(avail, key=lambda n: n.free):
            if n.free >= g:
                chosen, ok = [(n, g)], True
                break
    else:
        desc = sorted(avail, key=lambda n: n.free, reverse=True)
        if g % 8 == 0:
            need = g // 8
            for n in desc:
                if n.free < 8:
                    break
                if n.free == 8 and need > 0:
                    chosen.append((n, 8))
                    need -= 1
                if need == 0:
                    ok = True
                    break
        else:
            need = g // 8 + 1
            for n in desc:
                if n.free == 8 and need > 1:
                    chosen.append((n, 8))
                    need -= 1
                    continue
                if n.free >= g % 8 and need == 1:
                    chosen.append((n, g % 8))
                    ok = True
                break
    if not ok:
        return None
    for n, k in chosen:
        n.free -= k
    return [(n.name, k) for n, k in chosen]


def _stepper(
    jobs: list[SimJob], num_nodes: int, policy: str, prios: list[float] | None = None
) -> list[tuple[float, float]]:
    nodes = [_Node(i) for i in range(num_nodes)]
    st = [
        {
            "i": i,
            "submit": j.submit,
            "dur": j.duration,
            "g": j.gpus,
            "remain": j.duration,
            "status": None,
            "start": math.nan,
            "end": math.inf,
            "nodes": [],
            "ckpt": 0,
            "prio": -1.0,
        }
        for i, j in enumerate(jobs)
    ]
    trace = sorted(st, key=lambda d: d["submit"])
    que: list[dict] = []  # type: ignore[type-arg]
    run: list[dict] = []  # type: ignore[type-arg]
    done = 0
    t = 0.0
    total = 8 * num_nodes

    def release(job: dict) -> None:  # type: ignore[type-arg]
        for name, k in job["nodes"]:
            nodes[name].free += k
        job["nodes"] = []

    while done < len(jobs):
        new = 0
        for job in list(run):
            if policy == "srtf":
                if job["remain"] == 0:
                    job["end"] = t
                    done += 1
                    release(job)
                    run.remove(job)
                else:
                    job["remain"] -= 1
            elif job["end"] == t:
                done += 1
                release(job)
                run.remove(job)
        for job in trace:
            if job["submit"] == t:
                que.append(job)
                job["status"] = "pend"
                new += 1
        if policy == "srtf":
            cur = sorted(que + run, key=lambda d: d["remain"])
            quota = total
            pre, prerun = [], []
            for job in cur:
                if job["g"] <= quota:
                    quota -= job["g"]
                    if job["status"] == "pend":
                        prerun.append(job)
                elif job["status"] == "run":
                    pre.append(job)
            for job in pre:
                job["ckpt"] += 1
                job["status"] = "pend"
                job["remain"] += ckpt_overhead(job["g"])
                release(job)
                que.append(job)
                run.remove(job)
            for job in prerun:
                alloc = _artifact_place(nodes, job["g"])
                if alloc is not None:
                    job["nodes"] = alloc
                    job["status"] = "run"
                    if math.isnan(job["start"]):
                        job["start"] = t
                    que.remove(job)
                    run.append(job)
        else:
            if policy == "fifo":
                que.sort(key=lambda d: d["submit"])
            elif policy == "sjf":
                que.sort(key=lambda d: d["dur"])
            else:
                que.sort(key=lambda d: d["g"])
                if len(que) > new:
                    assert prios is not None
                    for job in que:
                        job["prio"] = prios[job["i"]]
                    que.sort(key=lambda d: d["prio"])
            for job in list(que):
                alloc = _artifact_place(nodes, job["g"])
                if alloc is None:
                    break
                job["nodes"] = alloc
                job["start"] = t
                job["end"] = t + job["dur"]
                job["status"] = "run"
                que.remove(job)
                run.append(job)
        t += 1
    return [(d["start"], d["end"]) for d in st]


def _random_jobs(rnd: random.Random, n: int, span: int) -> list[SimJob]:
    sizes = [1, 1, 2, 4, 8, 8, 12, 16]
    jobs = []
    for k in range(n):
        jobs.append(
            SimJob(str(k), float(rnd.randrange(span)), float(rnd.randint(1, 40)), rnd.choice(sizes))
        )
    jobs.sort(key=lambda j: j.submit)
    return jobs


@pytest.mark.parametrize("policy", ["fifo", "sjf", "qssf", "srtf"])
@pytest.mark.parametrize("seed", range(6))
def test_event_driven_engine_matches_the_one_second_loop(policy: str, seed: int) -> None:
    rnd = random.Random(seed)
    jobs = _random_jobs(rnd, 40, 200)
    prios = [float(rnd.randint(1, 5)) for _ in jobs]  # coarse: many ties
    num_nodes = 2 if seed % 2 else 3
    want = _stepper(jobs, num_nodes, policy, prios)
    out = simulate_vc(jobs, num_nodes, policy, priorities=prios)  # type: ignore[arg-type]
    # SRTF decides at submits and ends only; the artifact every second. They can differ
    # when a running job overtakes a picked-but-unplaceable queued job: not on these.
    assert [(o.start, o.end) for o in out] == want


# --- sizing and metrics -----------------------------------------------------------------


def test_size_vcs_by_offered_load_and_largest_job() -> None:
    # 8 GPUs busy half of a 10-hour span = load 0.5 of one node
    jobs = {"a": [(0.0, 18000.0, 8), (36000.0, 0.0, 8)], "b": [(0.0, 10.0, 24)]}
    assert size_vcs(jobs, target_load=0.5) == {"a": 1, "b": 3}
    assert size_vcs(jobs, target_load=0.25) == {"a": 2, "b": 3}
    with pytest.raises(ValueError):
        size_vcs(jobs, target_load=0)


def test_summary_percentiles_and_buckets() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    s = summarize([1, 2, 4, 8, 16, 128], [1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 6])
    assert s.avg_jct_s == 3.5 and s.avg_queue_s == 1.0
    assert list(s.by_gpus) == ["1", "2", "3-4", "5-8", "9-16", "65+"]
    assert s.by_gpus["65+"].avg_queue_s == 6


# --- tails -------------------------------------------------------------------------------


def test_tails_of_a_hand_made_schedule() -> None:
    # One 8-GPU node, FIFO: a (8 GPUs, 1000 s) runs 0..1000; b (8 GPUs, 10 s, submitted
    # at 10) waits 990 s; c (8 GPUs, 30 s, submitted at 20) waits 990 s (b ends at 1010).
    jobs = [SimJob("a", 0, 1000, 8), SimJob("b", 10, 10, 8), SimJob("c", 20, 30, 8)]
    out = simulate_vc(jobs, 1, "fifo")
    wait = [o.start - j.submit for j, o in zip(jobs, out, strict=True)]
    jct = jcts(jobs, out)
    assert wait == [0, 990, 990] and jct == [1000, 1000, 1020]
    t = tail_stats(wait, jct, [j.duration for j in jobs], jct)
    assert t.max_wait_s == 990
    assert t.p99_wait_s == pytest.approx(990)
    # bounded slowdown: 1000/1000 = 1, 1000/max(10, 60) = 16.67, 1020/60 = 17
    assert BSLD_BOUND_S == 60
    assert t.p99_bounded_slowdown == pytest.approx(1000 / 60 + 0.98 * (17 - 1000 / 60))
    assert t.share_jct_over_2x_fifo == 0 and t.share_jct_over_10x_fifo == 0  # FIFO itself


def test_tails_against_fifo_per_job() -> None:
    wait = [0.0, 5.0, 50.0, 500.0, 5000.0]
    jct = [10.0, 25.0, 100.0, 1000.0, 6000.0]
    dur = [10.0, 20.0, 50.0, 500.0, 1000.0]
    fifo = [10.0, 12.0, 10.0, 99.0, 7000.0]
    t = tail_stats(wait, jct, dur, fifo)
    # over 2x FIFO: job 1 (25 > 24), job 2 (100 > 20), job 3 (1000 > 198); not 0 (equal), 4
    assert t.share_jct_over_2x_fifo == pytest.approx(3 / 5)
    # over 10x: job 3 (1000 > 990); job 2 is exactly 10x: not over
    assert t.share_jct_over_10x_fifo == pytest.approx(1 / 5)
    assert t.max_wait_s == 5000
    # waits sorted 0, 5, 50, 500, 5000: p99 at position 3.96 = 500 + 0.96 * 4500
    assert t.p99_wait_s == pytest.approx(500 + 0.96 * 4500)
    # bounded slowdowns: 10/60, 25/60, 100/60, 1000/500 = 2, 6000/1000 = 6
    assert t.p99_bounded_slowdown == pytest.approx(2 + 0.96 * 4)
    assert sorted(t.as_dict()) == [
        "max_wait_s",
        "p99_bounded_slowdown",
        "p99_wait_s",
        "share_jct_over_10x_fifo",
        "share_jct_over_2x_fifo",
    ]


def test_tails_without_fifo_or_jobs_and_misaligned_input() -> None:
    t = tail_stats([1.0], [2.0], [1.0])
    assert math.isnan(t.share_jct_over_2x_fifo) and t.max_wait_s == 1.0
    empty = tail_stats([], [], [], [])
    assert math.isnan(empty.max_wait_s) and math.isnan(empty.p99_bounded_slowdown)
    with pytest.raises(ValueError):
        tail_stats([1.0, 2.0], [1.0], [1.0])


def test_tails_of_srtf_count_the_wait_before_the_first_start() -> None:
    # long (8 GPUs, 1000 s) starts at 0, is preempted at 10 by short (8 GPUs, 5 s) and
    # resumes: its wait before the first start is 0; short waits 0 too.
    jobs = [SimJob("long", 0, 1000, 8), SimJob("short", 10, 5, 8)]
    out = simulate_vc(jobs, 1, "srtf")
    assert out[0].preemptions == 1 and out[0].queue > 0
    wait = [o.start - j.submit for j, o in zip(jobs, out, strict=True)]
    t = tail_stats(wait, jcts(jobs, out), [j.duration for j in jobs])
    assert t.max_wait_s == 0
