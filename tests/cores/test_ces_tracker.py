"""The incremental ClusterLoadTracker against the old O(nodes)-per-message algorithm.

``bench/bench_ces_reference.py`` keeps the tracker as it was (every NodeStatus recounted
all nodes); on random streams (late events, silent nodes, job placements, gaps, ticks)
both must close the same slots with identical observations, also across a checkpoint.
"""

from __future__ import annotations

import importlib.util
import pickle
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpuhint.cores.ces import ClusterLoadTracker, SlotObservation
from gpuhint.wire import pickles
from gpuhint.wire.contract import JobEvent, NodeStatus

_REF = Path(__file__).resolve().parents[2] / "bench" / "bench_ces_reference.py"


def _reference() -> ModuleType:
    name = "ces_reference_v1"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _REF)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def random_stream(rng: random.Random, n_events: int) -> list[NodeStatus | JobEvent | tuple]:
    """Roughly time-ordered telemetry of two small clusters, with every awkward case."""
    slot = 60
    nodes = {c: [f"{c}-n{i}" for i in range(rng.randint(1, 9))] for c in ("a", "b")}
    jobs: dict[str, list[tuple[str, tuple[str, ...]]]] = {"a": [], "b": []}
    t = rng.uniform(0, 200)
    out: list[NodeStatus | JobEvent | tuple] = []
    for k in range(n_events):
        t += rng.expovariate(1 / 3)
        if rng.random() < 0.01:
            t += rng.uniform(0, 30 * slot)  # a gap: several slots close at once
        c = rng.choice("ab")
        late = max(0.0, t - rng.uniform(0, 40)) if rng.random() < 0.15 else t  # out of order
        r = rng.random()
        if r < 0.75:
            node = rng.choice(nodes[c])
            num = rng.choice([0, 4, 8])
            out.append(
                NodeStatus(
                    cluster=c,
                    node=node,
                    time=late,
                    num_gpus=num,
                    busy_gpus=rng.choice([0, 0, 1, num]) if num else 0,
                    powered_on=rng.random() > 0.08,
                    healthy=rng.random() > 0.05,
                    running_jobs=["x"] if rng.random() < 0.1 else [],
                )
            )
        elif r < 0.85:
            placed = tuple(rng.sample(nodes[c], rng.randint(1, len(nodes[c]))))
            if rng.random() < 0.2:
                placed += (f"{c}-new{k}",)  # a node known only from a placement
            jid = f"j{k}"
            jobs[c].append((jid, placed))
            out.append(
                JobEvent(
                    phase="started", job_id=jid, cluster=c, time=late, submit_time=0, nodes=placed
                )
            )
        elif r < 0.95 and jobs[c]:
            jid, placed = jobs[c].pop(rng.randrange(len(jobs[c])))
            part = placed if rng.random() < 0.7 else placed[:1]
            out.append(
                JobEvent(
                    phase="finished", job_id=jid, cluster=c, time=late, submit_time=0, nodes=part
                )
            )
        elif r < 0.97:
            out.append(
                JobEvent(phase="submitted", job_id=f"s{k}", cluster=c, time=late, submit_time=0)
            )
        else:
            out.append(("tick", c, late))
    return out


def _apply(tracker: Any, ev: NodeStatus | JobEvent | tuple) -> list[SlotObservation]:
    if isinstance(ev, JobEvent) and not isinstance(tracker, ClusterLoadTracker):
        ev = _freeing_all(tracker, ev)
    if isinstance(ev, tuple):
        return tracker.tick(ev[1], ev[2])
    if isinstance(ev, NodeStatus):
        return tracker.on_node_status(ev)
    return tracker.on_job_event(ev)


def _freeing_all(ref: Any, ev: JobEvent) -> JobEvent:
    """The reference frees only the nodes a ``finished`` lists; the tracker frees every
    node of the job: name them all to the reference (the stream lists some only)."""
    placed: dict[tuple[str, str], tuple[str, ...]] = ref.__dict__.setdefault("_placed", {})
    key = (ev.cluster, ev.job_id)
    if ev.phase == "started":
        placed[key] = tuple(dict.fromkeys(placed.get(key, ()) + ev.nodes))
    elif ev.phase == "finished":
        rest = tuple(n for n in placed.pop(key, ()) if n not in ev.nodes)
        ev = ev.model_copy(update={"nodes": ev.nodes + rest})
    return ev


@pytest.mark.parametrize("seed", range(40))
def test_same_observations_as_the_reference_on_random_streams(seed: int) -> None:
    rng = random.Random(seed)
    stale = rng.choice([10.0, 30.0, 60.0, 200.0])
    ref = _reference().ReferenceTracker(slot_s=60, max_gap_slots=5, stale_after_s=stale)
    new = ClusterLoadTracker(slot_s=60, max_gap_slots=5, stale_after_s=stale)
    closed = 0
    for k, ev in enumerate(random_stream(rng, 1500)):
        want, got = _apply(ref, ev), _apply(new, ev)
        assert got == want, f"seed {seed}, event {k}: {ev}"
        closed += len(want)
        if k % 97 == 0:  # a restart from a checkpoint resumes identically
            new = pickle.loads(pickle.dumps(new, protocol=pickle.HIGHEST_PROTOCOL))
        for name, c in new.clusters.items():  # the lazy counters agree with a recount
            now = ev[2] if isinstance(ev, tuple) else ev.time
            want_used = ref._used(ref.clusters[name], now)
            assert c.count_used(now, stale) == want_used
    assert closed > 10  # the streams do close slots


def test_counters_stay_bounded_under_churn() -> None:
    """Superseded heap entries are dropped: memory follows the nodes, not the messages."""
    t = ClusterLoadTracker(slot_s=600, stale_after_s=120)
    for k in range(60_000):
        node = f"n{k % 50}"
        t.on_node_status(NodeStatus(node=node, time=k * 0.2, num_gpus=8, busy_gpus=8 * (k % 2)))
    c = t.clusters["default"]
    assert len(c.above) + len(c.below) <= 3 * 50 + 2 * 1024


def test_a_version_1_checkpoint_migrates() -> None:
    """A checkpoint of the per-node-object tracker (the one before) is read as it was."""
    ref_mod = _reference()
    ref = ref_mod.ReferenceTracker(slot_s=60, stale_after_s=30)
    new = ClusterLoadTracker(slot_s=60, stale_after_s=30)
    stream = random_stream(random.Random(7), 800)
    for ev in stream[:400]:
        _apply(ref, ev)
    # a v1 pickle names gpuhint.cores.ces._Tracked/_Node: write one (protocol 0 is text)
    blob = pickle.dumps(ref.clusters, protocol=0)
    blob = blob.replace(b"cces_reference_v1\n_RefTracked\n", b"cgpuhint.ces_core\n_Tracked\n")
    blob = blob.replace(b"cces_reference_v1\n_RefNode\n", b"cgpuhint.ces_core\n_Node\n")
    assert b"ces_reference_v1" not in blob
    new.clusters = pickles.loads(blob)
    for ev in stream[400:]:
        assert _apply(new, ev) == _apply(ref, ev)


@pytest.mark.parametrize("seed", range(10))
def test_the_counters_stay_exact_when_silent_nodes_are_forgotten(seed: int) -> None:
    """Forgetting nodes renumbers the columns: the lazy counters (rebuilt) still agree
    with a recount, the job index still points at the right nodes, across checkpoints."""
    rng = random.Random(seed)
    t = ClusterLoadTracker(slot_s=60, max_gap_slots=5, stale_after_s=30, forget_after_s=300)
    forgot = 0
    for k, ev in enumerate(random_stream(rng, 1500)):
        before = {(k, name) for k, tr in t.clusters.items() for name in tr.names}
        _apply(t, ev)
        forgot += len(before - {(k, name) for k, tr in t.clusters.items() for name in tr.names})
        if k % 97 == 0:
            t = pickle.loads(pickle.dumps(t, protocol=pickle.HIGHEST_PROTOCOL))
        now = ev[2] if isinstance(ev, tuple) else ev.time
        for c in t.clusters.values():
            recount = sum(c.used(i) and c.on_at(i, now, 30) for i in range(len(c.names)))
            assert c.count_used(now, 30) == recount
            assert c.index == {n: i for i, n in enumerate(c.names)}
            assert c.placed == {
                j: {i for i, ids in c.jobs.items() if j in ids}
                for j in {j for ids in c.jobs.values() for j in ids}
            }
    assert forgot, "no node was forgotten"
