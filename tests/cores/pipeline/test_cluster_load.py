"""The worker's CES glue without a broker: a closed loop of agents that obey advisories."""

from __future__ import annotations

import importlib.util
import pickle
import random
import sys
from pathlib import Path

import pytest

from gpuhint.cores.ces import CesEngine, ClusterLoadTracker
from gpuhint.cores.pipeline.cluster_load import ClusterLoadProcessor
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import NodeStatus, PowerAction

SLOT = 600
NODES = [f"n{i:02d}" for i in range(20)]


def demand(t: float) -> int:
    """Nodes in use: 3 for three days, then 16."""
    return 3 if t < 3 * 86400 else 16


def test_closed_loop_powers_down_then_wakes_named_nodes() -> None:
    store = InMemoryStore()
    proc = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(store))
    on = set(NODES)
    downs: list[tuple[str, ...]] = []
    wakes: list[tuple[str, ...]] = []
    for t in range(0, 5 * 86400, 60):  # every agent reports every minute while on
        busy = sorted(on)[: demand(t)]
        closed = []
        for node in sorted(on):
            closed += proc.on_message(
                NodeStatus(
                    cluster="c", node=node, time=t, num_gpus=8, busy_gpus=8 if node in busy else 0
                )
            )
        if not closed:
            continue
        store.flush()
        adv = store.get_advisory("c")
        assert adv is not None
        if adv.time != t - t % SLOT:
            continue
        if adv.action is PowerAction.POWER_DOWN:
            assert set(adv.nodes) <= on, "advised to power down nodes that are already off"
            assert not set(adv.nodes) & set(busy), "advised to power down busy nodes"
            downs.append(adv.nodes)
            on -= set(adv.nodes)  # the operator follows the advice: those agents fall silent
        elif adv.action is PowerAction.WAKE:
            assert set(adv.nodes).isdisjoint(on), "advised to wake nodes that are on"
            wakes.append(adv.nodes)
            on |= set(adv.nodes)
    assert downs, "never powered a node down in three quiet days"
    assert wakes, "never woke a node when demand rose"
    assert len(on) >= demand(5 * 86400 - 1)  # demand is met at the end


def test_checkpoint_restores_cluster_state() -> None:
    checkpoints: dict[str, bytes] = {}
    first = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), checkpoints)
    for t in range(0, 3 * SLOT, 60):
        for node in NODES[:4]:
            first.on_message(NodeStatus(cluster="c", node=node, time=t, num_gpus=8))
    assert checkpoints == {}  # saved at the end of a batch, not per message
    assert first.checkpoint_dirty() == 1 and set(checkpoints) == {"c"}
    assert first.checkpoint_dirty() == 0
    second = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), checkpoints)
    closed = second.on_message(NodeStatus(cluster="c", node="n00", time=3 * SLOT, num_gpus=8))
    assert [o.time for o in closed] == [2 * SLOT]  # continues at the next slot, not from zero
    assert second.engine.clusters["c"].slot == 3
    assert closed[0].total == 4


def test_forget_rereads_the_newest_checkpoint() -> None:
    checkpoints: dict[str, bytes] = {}
    mine = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), checkpoints)
    theirs = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), checkpoints)
    for t in range(0, 2 * SLOT, 60):
        mine.on_message(NodeStatus(cluster="c", node="n00", time=t, num_gpus=8))
    mine.checkpoint_dirty()
    # a rebalance: another worker owns the cluster for a while and checkpoints further
    for t in range(2 * SLOT, 5 * SLOT, 60):
        theirs.on_message(NodeStatus(cluster="c", node="n00", time=t, num_gpus=8))
    theirs.checkpoint_dirty()
    mine.forget()  # the partition comes back
    closed = mine.on_message(NodeStatus(cluster="c", node="n00", time=5 * SLOT, num_gpus=8))
    assert [o.time for o in closed] == [4 * SLOT]  # continues from the newest state


def _telemetry(seed: int) -> list[NodeStatus]:
    """Ten nodes reporting every 30 s for 40 min; load moves, some go silent a while."""
    rng = random.Random(seed)
    msgs = []
    for t in range(0, 4 * SLOT, 30):
        for node in NODES[:10]:
            if node in NODES[7:9] and SLOT <= t < 2 * SLOT:
                continue  # powered down for a slot: they go stale
            jitter = rng.uniform(0, 5)
            busy = 8 if rng.random() < 0.4 else 0
            msgs.append(
                NodeStatus(cluster="c", node=node, time=t + jitter, num_gpus=8, busy_gpus=busy)
            )
    return msgs


def _run(proc: ClusterLoadProcessor, msgs: list[NodeStatus], batch: int) -> list[object]:
    out: list[object] = []
    for k in range(0, len(msgs), batch):
        for m in msgs[k : k + batch]:
            out += proc.on_message(m)
        proc.checkpoint_dirty()
    return out


def test_a_crash_mid_batch_resumes_identically() -> None:
    """Kill the worker mid-batch: the new one restores the last checkpoint, the
    uncommitted messages are redelivered, and every slot and advisory comes out as in a
    run without the crash."""
    msgs, batch = _telemetry(3), 25
    store_a = InMemoryStore()
    whole = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(store_a), {})
    want = _run(whole, msgs, batch)
    assert len(want) >= 3

    checkpoints: dict[str, bytes] = {}
    store_b = InMemoryStore()
    crashed = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(store_b), checkpoints)
    cut = 22 * batch  # offsets of 22 batches were committed (two slots closed)
    got = _run(crashed, msgs[:cut], batch)
    lost: list[object] = []
    for m in msgs[cut : cut + 20]:  # applied, never checkpointed: lost with the process
        lost += crashed.on_message(m)
    assert lost, "the lost messages should close a slot (written again after the restart)"
    restarted = ClusterLoadProcessor(
        ClusterLoadTracker(slot_s=SLOT), CesEngine(store_b), checkpoints
    )
    got += _run(restarted, msgs[cut:], batch)
    assert got == want
    assert pickle.dumps(restarted.engine.clusters["c"].policy) == pickle.dumps(
        whole.engine.clusters["c"].policy
    )


def test_a_version_1_checkpoint_is_read_and_migrated() -> None:
    """A checkpoint written before the columnar tracker (per-node objects) still restores."""
    if "ces_reference_v1" not in sys.modules:  # the tracker before, as v1 pickled it
        path = Path(__file__).resolve().parents[3] / "bench" / "bench_ces_reference.py"
        spec = importlib.util.spec_from_file_location("ces_reference_v1", path)
        assert spec is not None and spec.loader is not None
        sys.modules["ces_reference_v1"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["ces_reference_v1"])
    ref = sys.modules["ces_reference_v1"]
    msgs = _telemetry(5)
    old = ClusterLoadProcessor(ref.ReferenceTracker(slot_s=SLOT), CesEngine(), {})
    want_new = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), {})
    for m in msgs[:300]:
        old.on_message(m)
        want_new.on_message(m)
    v1 = (1, old.tracker.clusters["c"], old.engine.clusters["c"])
    blob = pickle.dumps(v1, protocol=0)  # text opcodes: rename the classes as v1 had them
    blob = blob.replace(b"cces_reference_v1\n_RefTracked\n", b"cgpuhint.ces_core\n_Tracked\n")
    blob = blob.replace(b"cces_reference_v1\n_RefNode\n", b"cgpuhint.ces_core\n_Node\n")
    assert b"ces_reference_v1" not in blob
    restored = ClusterLoadProcessor(ClusterLoadTracker(slot_s=SLOT), CesEngine(), {"c": blob})
    got = _run(restored, msgs[300:], 25)
    assert got == _run(want_new, msgs[300:], 25) and got


def test_the_worker_settings_reach_the_job_aware_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPUHINT_CES_* (quantile, boot, cycle limit, how long advice is believed) configure
    the engine the worker and `gpuhint serve` build."""
    from gpuhint.cores.pipeline.cluster_load import processor_from_settings
    from gpuhint.wire.config import Settings, load_settings

    for name, value in {
        "GPUHINT_CES_QUANTILE": "0.9",
        "GPUHINT_CES_BOOT_S": "120",
        "GPUHINT_CES_MAX_CYCLES_PER_NODE_DAY": "3",
        "GPUHINT_CES_CONFIRM_S": "1800",
    }.items():
        monkeypatch.setenv(name, value)
    proc = processor_from_settings(load_settings(), InMemoryStore())
    assert proc.jobs is not None
    cfg = proc.jobs.cfg
    assert cfg.policy.quantile == 0.9 and cfg.policy.max_cycles_per_day == 3
    assert cfg.power.boot_s == 120 and cfg.confirm_s == 1800
    assert Settings.model_fields["ces_confirm_s"].default == 300.0


def test_the_forget_window_is_a_setting_of_both_ces_engines() -> None:
    """GPUHINT_CES_FORGET_NODE_AFTER_S reaches the load tracker and the job-aware engine;
    one shorter than the stale window is refused at load (one line, not a ValueError at
    the worker's first message)."""
    from gpuhint.cores.pipeline.cluster_load import processor_from_settings
    from gpuhint.wire.config import ConfigError, load_settings

    proc = processor_from_settings(load_settings(ces_forget_node_after_s=3600), None)
    assert proc.tracker.forget_after_s == 3600
    assert proc.jobs is not None and proc.jobs.cfg.forget_after_s == 3600
    with pytest.raises(ConfigError, match="GPUHINT_CES_FORGET_NODE_AFTER_S"):
        load_settings(ces_forget_node_after_s=60)
