"""The job-aware CES engine's belief about a cluster (gpuhint.cores.ces_jobs_state) when
messages come twice, late or contradict it: resends, failed wakes, advice overtaken by a
job, nodes of other sizes, and checkpoints taken in the middle of all that."""

from __future__ import annotations

import pickle
from dataclasses import replace

from gpuhint.cores.ces_jobs import OFF, ON, JobsCesConfig, JobsCesEngine
from gpuhint.cores.ces_jobs_state import JobsCluster
from gpuhint.cores.pipeline.cluster_load import (
    ClusterLoadProcessor,
    make_jobs_config,
    make_processor,
)
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire import pickles
from gpuhint.wire.contract import JobEvent, NodeStatus
from models.power_jobs import JobAwareConfig


def _ev(
    phase: str,
    job: str,
    t: float,
    nodes: tuple[str, ...] = (),
    gpus: int = 8,
    submit: float = 0.0,
) -> JobEvent:
    return JobEvent(
        phase=phase,  # type: ignore[arg-type]
        job_id=job,
        num_gpus=gpus,
        time=t,
        submit_time=submit,
        nodes=nodes,
    )


def _eng(**kw: float) -> JobsCesEngine:
    return JobsCesEngine(None, JobsCesConfig(JobAwareConfig(warmup_s=0, **kw), keep_decisions=999))  # type: ignore[arg-type]


def _ran_one_job(eng: JobsCesEngine) -> None:
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(_ev("submitted", "j", 10, submit=10))
    eng.on_message(_ev("started", "j", 20, ("a",), submit=10))
    eng.on_message(_ev("finished", "j", 30, ("a",), submit=10))


def _proc(table: dict[str, bytes], **kw: float) -> ClusterLoadProcessor:
    jcfg = JobsCesConfig(JobAwareConfig(warmup_s=0, **kw), keep_decisions=99)  # type: ignore[arg-type]
    return make_processor(None, policy="jobs", jobs_config=jcfg, checkpoints=table)


# -- resends and late events ---------------------------------------------------------


def test_a_resent_submit_of_a_finished_job_does_not_queue_it_again() -> None:
    eng = _eng()
    _ran_one_job(eng)
    c = eng.cluster("default")
    assert c.core is not None
    arrivals = len(c.core.arrivals)
    eng.on_message(_ev("submitted", "j", 10, submit=10))  # the producer's resend
    assert c.head_gpus() is None, "a finished job at the head of the queue forever"
    assert len(c.core.arrivals) == arrivals, "a replayed submit counted twice"


def test_a_resent_start_of_a_finished_job_does_not_pin_its_node() -> None:
    eng = _eng()
    _ran_one_job(eng)
    eng.on_message(_ev("started", "j", 20, ("a",), submit=10))  # redelivered
    c = eng.cluster("default")
    assert c.jobs_on[c.index["a"]] == 0 and "j" not in c.running


def test_a_finished_job_resent_keeps_no_node_on() -> None:
    eng = _eng()
    _ran_one_job(eng)
    eng.on_message(_ev("submitted", "j", 10, submit=10))
    eng.on_message(_ev("started", "j", 20, ("a",), submit=10))
    c = eng.cluster("default")
    for t in range(60, 2 * 86400, 300):  # two quiet days, the nodes report
        for n in ("a", "b"):
            on = c.state[c.index[n]] != OFF
            eng.on_message(NodeStatus(node=n, time=t, num_gpus=8, powered_on=on))
    eng.flush("default")
    assert all(s == OFF for s in c.state), c.state


def test_a_finish_before_its_submit_and_start_wins() -> None:
    eng = _eng()
    eng.on_message(NodeStatus(node="a", time=0, num_gpus=8))
    eng.on_message(_ev("finished", "j", 30, ("a",)))  # out of order: the finish first
    eng.on_message(_ev("submitted", "j", 10, submit=10))
    eng.on_message(_ev("started", "j", 20, ("a",)))
    c = eng.cluster("default")
    assert c.head_gpus() is None and not c.running and c.jobs_on == [0]


def test_a_second_submit_of_a_waiting_job_is_one_arrival() -> None:
    eng = _eng()
    eng.on_message(NodeStatus(node="a", time=0, num_gpus=8))
    eng.on_message(_ev("submitted", "j", 10, gpus=16, submit=10))
    eng.on_message(_ev("submitted", "j", 10, gpus=16, submit=10))
    c = eng.cluster("default")
    assert c.core is not None and list(c.core.arrivals) == [(10.0, 2.0)]


def test_the_finished_jobs_survive_a_restart() -> None:
    table: dict[str, bytes] = {}
    p = _proc(table)
    for m in (
        NodeStatus(node="a", time=0, num_gpus=8),
        _ev("submitted", "j", 10, submit=10),
        _ev("finished", "j", 30),
    ):
        p.on_message(m)
        p.checkpoint_dirty()
    q = _proc(table)
    q.on_message(_ev("submitted", "j", 10, submit=10))  # resent after the restart
    assert q.jobs is not None
    assert q.jobs.clusters["default"].head_gpus() is None


def test_a_late_older_node_status_does_not_undo_a_newer_one() -> None:
    """A copy of a's report from before it was powered off arrives late: a stays off
    (not believed on and idle, capacity the policy would count on)."""
    eng = _eng()
    eng.on_message(NodeStatus(node="a", time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="a", time=100, num_gpus=8, powered_on=False))
    eng.on_message(NodeStatus(node="a", time=50, num_gpus=8))  # late
    c = eng.cluster("default")
    assert c.state[c.index["a"]] == OFF and c.index["a"] not in c.idle


def test_node_statuses_redelivered_after_a_crash_change_nothing() -> None:
    """The worker re-applies a batch after a crash on top of the checkpoint that holds
    it: a's idle time (since 100) must not restart at the clock (200)."""
    table: dict[str, bytes] = {}
    p = _proc(table, min_idle_s=3600)
    batch = [
        NodeStatus(node="a", time=0, num_gpus=8, busy_gpus=8),
        NodeStatus(node="b", time=0, num_gpus=8),
        NodeStatus(node="a", time=100, num_gpus=8),
        NodeStatus(node="b", time=200, num_gpus=8),
    ]
    for m in batch:
        p.on_message(m)
    p.checkpoint_dirty()  # ... and the worker dies before committing the batch's offsets
    q = _proc(table, min_idle_s=3600)
    for m in batch:
        q.on_message(m)
    assert p.jobs is not None and q.jobs is not None
    live, back = p.jobs.clusters["default"], q.jobs.clusters["default"]
    assert back.idle == live.idle == {1: 0.0, 0: 100.0}
    assert list(back.idle) == list(live.idle)


def test_a_late_node_status_after_a_restart_is_ignored_as_without_it() -> None:
    """b's report at 115 changed nothing but its time (the state was not re-encoded):
    the checkpoint still knows it, so a late copy of 112 saying off is ignored."""
    table: dict[str, bytes] = {}
    p = _proc(table, min_idle_s=3600)
    batches = [
        [
            NodeStatus(node="a", time=0, num_gpus=8, busy_gpus=8),
            NodeStatus(node="b", time=0, num_gpus=8),
            NodeStatus(node="a", time=100, num_gpus=8),
        ],
        [NodeStatus(node="a", time=110, num_gpus=8)],
        [NodeStatus(node="b", time=115, num_gpus=8)],
    ]
    for batch in batches:
        for m in batch:
            p.on_message(m)
        p.checkpoint_dirty()
    q = _proc(table, min_idle_s=3600)
    late = NodeStatus(node="b", time=112, num_gpus=8, powered_on=False)
    p.on_message(late)
    q.on_message(late)
    assert p.jobs is not None and q.jobs is not None
    live, back = p.jobs.clusters["default"], q.jobs.clusters["default"]
    assert back.state == live.state == [ON, ON] and back.idle == live.idle


# -- checkpoints -------------------------------------------------------------------


def _advised_down_then_busy() -> list[NodeStatus]:
    return [
        NodeStatus(node="a", time=0, num_gpus=8),
        NodeStatus(node="b", time=0, num_gpus=8),
        NodeStatus(node="b", time=1, num_gpus=8),  # the decision at 0: a, b down
        # a has not gone down yet (the advice is being applied) and reports a job
        NodeStatus(node="a", time=10, num_gpus=8, busy_gpus=8),
    ]


def test_a_status_in_the_confirm_window_is_checkpointed() -> None:
    table: dict[str, bytes] = {}
    p = _proc(table)
    for m in _advised_down_then_busy():
        p.on_message(m)
        p.checkpoint_dirty()
    assert p.jobs is not None
    live = p.jobs.clusters["default"]
    assert live.state[live.index["a"]] == OFF and live.status_busy[live.index["a"]]
    q = _proc(table)
    q._restore("default")
    assert q.jobs is not None
    assert q.jobs.clusters["default"].status_busy == live.status_busy


def test_a_restart_after_a_status_in_the_confirm_window_decides_alike() -> None:
    table: dict[str, bytes] = {}
    p = _proc(table)
    for m in _advised_down_then_busy():
        p.on_message(m)
        p.checkpoint_dirty()
    q = _proc(table)
    tail: list[JobEvent | NodeStatus] = [
        _ev("started", "j", 20, ("a",)),
        _ev("finished", "j", 400, ("a",)),
        NodeStatus(node="b", time=2000, num_gpus=8, powered_on=False),
    ]
    for msg in tail:
        p.on_message(msg)
        q.on_message(msg)
    assert p.jobs is not None and q.jobs is not None
    assert q.jobs.flush("default") == p.jobs.flush("default")


def test_a_restart_keeps_the_cycle_limit_after_a_confirmed_power_down() -> None:
    table: dict[str, bytes] = {}
    p = _proc(table, max_cycles_per_day=1)
    head = [
        NodeStatus(node="a", time=0, num_gpus=8),
        NodeStatus(node="b", time=0, num_gpus=8),
        NodeStatus(node="b", time=1, num_gpus=8),  # decision at 0: a, b down (1 of 1)
        NodeStatus(node="a", time=30, num_gpus=8, powered_on=False),  # a's down confirmed
    ]
    for m in head:
        p.on_message(m)
        p.checkpoint_dirty()
    q = _proc(table, max_cycles_per_day=1)
    tail = [
        NodeStatus(node="a", time=1000, num_gpus=8),  # a powered on by someone else
        NodeStatus(node="b", time=2000, num_gpus=8, powered_on=False),
    ]
    for m in tail:
        p.on_message(m)
        q.on_message(m)
    assert p.jobs is not None and q.jobs is not None
    live, back = p.jobs.flush("default"), q.jobs.flush("default")
    assert len([t for t, _, d in back if "a" in d]) <= 1, back  # one power-down of a a day
    assert back == live


def test_a_checkpoint_of_before_the_new_fields_still_loads() -> None:
    eng = _eng()
    _ran_one_job(eng)
    c = eng.cluster("default")
    for name in ("finished", "woken", "wake_failed", "node_gpus", "gpu_nodes", "g", "seen"):
        del c.__dict__[name]
    old = pickle.dumps(c, protocol=0).replace(
        b"gpuhint.cores.ces_jobs_state", b"gpuhint.cores.ces_jobs"
    )  # the module the class lived in then
    back = pickles.loads(old)
    assert isinstance(back, JobsCluster)
    assert (back.finished, back.node_gpus, back.g) == ({}, [0, 0], 8)
    assert list(back.seen) == [float("-inf")] * 2
    eng.clusters["default"] = back
    eng.on_message(NodeStatus(node="a", time=100, num_gpus=4))
    assert back.g == 4


# -- wakes that fail, nodes of another size, advice overtaken --------------------------


def test_a_failed_wake_is_not_retried_on_the_same_node_forever() -> None:
    eng = _eng()
    for n in ("a", "b", "c"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="a", time=60, num_gpus=8))
    c = eng.cluster("default")
    assert all(s == OFF for s in c.state)
    eng.on_message(_ev("submitted", "big", 100, submit=100))  # the head needs one node
    t = 100
    for _ in range(4):  # the woken nodes never come up (off after a boot + confirm_s)
        t += 700
        for n in ("a", "b", "c"):
            eng.on_message(NodeStatus(node=n, time=t, num_gpus=8, powered_on=False))
    woken = [w for _, w, _ in eng.flush("default") if w]
    assert any("c" in w for w in woken), woken  # c, off and never failed, is tried
    assert woken[2][0] == "c"  # first, once a and b failed


def test_a_wake_is_given_a_boot_and_the_confirm_window() -> None:
    eng = _eng()
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="a", time=60, num_gpus=8))
    eng.on_message(_ev("submitted", "big", 100, submit=100))
    (_, woke, _) = eng.flush("default")[-1]  # woken at 100, up at 400 (boot_s 300)
    c = eng.cluster("default")
    i = c.index[woke[0]]
    eng.on_message(NodeStatus(node=c.names[i], time=500, num_gpus=8, powered_on=False))
    assert c.state[i] != OFF and not c.wake_failed  # still booting, slower than boot_s
    eng.on_message(NodeStatus(node=c.names[i], time=701, num_gpus=8, powered_on=False))
    assert c.state[i] == OFF and i in c.wake_failed


def test_the_heads_need_uses_the_nodes_gpu_count() -> None:
    eng = _eng()
    names = [f"n{k}" for k in range(8)]
    for n in names:
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=4))  # 4-GPU nodes
    eng.on_message(NodeStatus(node="n0", time=60, num_gpus=4, powered_on=False))
    c = eng.cluster("default")
    assert all(s == OFF for s in c.state) and c.g == 4
    eng.on_message(_ev("submitted", "j", 100, gpus=16, submit=100))  # needs 4 nodes
    eng.on_message(NodeStatus(node="n0", time=101, num_gpus=4, powered_on=False))
    first_wake = next(w for _, w, _ in eng.flush("default") if w)
    assert len(first_wake) >= 4, first_wake


def test_the_gpus_per_node_is_the_most_common_count() -> None:
    eng = _eng()
    assert eng.cluster("default").g == 8  # the setting, until a node reports
    for k, g in enumerate((4, 4, 8, 0)):  # 0: a node without GPUs counts not
        eng.on_message(NodeStatus(node=f"n{k}", time=0, num_gpus=g))
    c = eng.cluster("default")
    assert c.g == 4 and c.core is not None and c.core.g == 4
    eng.on_message(NodeStatus(node="n0", time=1, num_gpus=8))  # n0 re-fitted
    assert c.g == 8 and c.core.g == 8


def test_a_power_down_overtaken_by_a_job_does_not_count_as_a_cycle() -> None:
    eng = _eng(max_cycles_per_day=1)
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="b", time=1, num_gpus=8))  # decision at 0: a, b down
    c = eng.cluster("default")
    i = c.index["a"]
    assert c.state[i] == OFF and c.cycles[i] == 1
    # Slurm placed a job on a before apply-power acted: a never went down
    eng.on_message(_ev("started", "j", 10, ("a",)))
    for t in (20, 100, 200, 400, 700):
        eng.on_message(NodeStatus(node="a", time=t, num_gpus=8, busy_gpus=8))
    assert c.core is not None
    assert c.cycles[i] == 0 and len(c.core.downs[i]) == 0 and c.state[i] != OFF


def test_a_power_down_that_happened_before_the_job_still_counts() -> None:
    eng = _eng(max_cycles_per_day=1)
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="b", time=1, num_gpus=8))
    c = eng.cluster("default")
    i = c.index["a"]
    eng.on_message(_ev("started", "j", 10, ("a",)))  # Slurm resumes a for the job
    eng.on_message(NodeStatus(node="a", time=20, num_gpus=8, powered_on=False))  # it was off
    for t in (320, 400, 700):
        eng.on_message(NodeStatus(node="a", time=t, num_gpus=8, busy_gpus=8))
    assert c.cycles[i] == 1 and c.state[i] != OFF


# -- checkpoint size -----------------------------------------------------------------


def test_a_checkpoint_stays_small_with_the_longest_ids_and_a_week_of_history() -> None:
    """4,096 finished jobs with 256-character ids (the contract's longest) and a week of
    minute ticks: before packing that was ~1.5 MB, over Kafka's default record limit."""
    eng = _eng()
    for n in ("a", "b"):
        eng.on_message(NodeStatus(node=n, time=0, num_gpus=8))
    t = 0.0
    for k in range(4200):
        job = f"{k:08d}".ljust(256, "x")
        t += 150.0
        eng.on_message(_ev("submitted", job, t, submit=t))
        eng.on_message(_ev("started", job, t + 1, ("a",), submit=t))
        eng.on_message(_ev("finished", job, t + 2, ("a",), submit=t))
    c = eng.cluster("default")
    assert len(c.finished) == 4096 and c.has_finished(f"{4199:08d}".ljust(256, "x"))
    assert not c.has_finished(f"{0:08d}".ljust(256, "x"))  # the oldest forgotten
    c.decisions.clear()
    assert len(pickle.dumps(c, protocol=pickle.HIGHEST_PROTOCOL)) < 100_000


def test_a_checkpoint_with_the_finished_ids_themselves_still_refuses_their_resends() -> None:
    eng = _eng()
    _ran_one_job(eng)
    c = eng.cluster("default")
    old = dict(c.__dict__, finished={"j": None})  # the layout of before 2026-12-07
    back = JobsCluster.__new__(JobsCluster)
    back.__setstate__(old)
    eng.clusters["default"] = back
    assert back.core is not None
    arrivals = len(back.core.arrivals)
    assert back.has_finished("j") and not back.has_finished("k")
    eng.on_message(_ev("submitted", "j", 40, submit=10))
    assert "j" not in back.queue and len(back.core.arrivals) == arrivals
    eng.on_message(_ev("submitted", "k", 41, submit=41))
    assert "k" in back.queue and len(back.core.arrivals) == arrivals + 1


def test_an_unreadable_job_aware_checkpoint_does_not_stop_the_worker() -> None:
    """A checkpoint whose job-aware part cannot be read is ignored (logged) as a wholly
    unreadable one is: the cluster starts afresh instead of every message raising."""
    table = {"default": pickle.dumps((3, None, None, (b"not a pickle", 0.0)))}
    p = _proc(table)
    p.on_message(NodeStatus(node="a", time=0, num_gpus=8))
    assert p.jobs is not None
    assert p.jobs.clusters["default"].names == ["a"]


# -- nodes that leave the cluster ------------------------------------------------------


def test_a_node_silent_for_a_week_while_believed_on_is_forgotten() -> None:
    """b was removed (or renamed): its last report said on and idle, then nothing. It
    must not stay idle capacity (and a power-down candidate) forever; c, off and silent,
    stays (a node to wake); after a restart the cluster decides alike."""
    store = InMemoryStore()
    cfg = make_jobs_config()
    cfg = replace(cfg, policy=JobAwareConfig(warmup_s=0, min_idle_s=30 * 86400.0))
    eng = JobsCesEngine(store, cfg)
    eng.on_message(NodeStatus(node="b", time=0, num_gpus=8))
    eng.on_message(NodeStatus(node="c", time=0, num_gpus=8, powered_on=False))
    c = eng.cluster("default")
    for t in range(0, 8 * 86400, 600):
        eng.on_message(NodeStatus(node="a", time=t, num_gpus=4))
        if t == 6 * 86400:
            assert c.names == ["b", "c", "a"] and c.index["b"] in c.idle
            eng.on_message(_ev("started", "j", t, ("a",), submit=t))  # runs past the sweep
        if t == 7.5 * 86400:
            assert c.running["j"][2] == (1,)  # renumbered with its node
            eng.on_message(_ev("finished", "j", t, ("a",), submit=6 * 86400))
    assert c.names == ["c", "a"] and c.idle == {1: 7.5 * 86400} and c.jobs_on == [0, 0]
    assert c.index == {"c": 0, "a": 1} and c.state == [OFF, ON] and c.seen[0] == 0.0
    assert c.gpu_nodes == {8: 1, 4: 1}
    store.flush()
    adv = store.get_advisory("default")
    assert adv is not None and adv.total_nodes == 2 and adv.off_nodes == ("c",)
    back = pickles.loads(pickle.dumps(c))
    eng.on_message(NodeStatus(node="b", time=8 * 86400, num_gpus=8))  # it came back
    assert c.names == ["c", "a", "b"] and c.index["b"] in c.idle
    again = JobsCesEngine(None, cfg)
    again.clusters["default"] = back
    again.on_message(NodeStatus(node="b", time=8 * 86400, num_gpus=8))
    assert (back.names, back.idle, back.state) == (c.names, c.idle, c.state)
