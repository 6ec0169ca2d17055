"""What serving metrics costs: a scrape of the Redis state gauges, the metered store's
flush next to the plain one, and the agent's DCGM exposition.

Starts its own redis-server (or uses ``GPUHINT_TEST_REDIS_URL``), writes ``--jobs``
hints over ``--vcs`` VC queues of ``--clusters`` clusters, then times each part.

    python bench/bench_metrics.py [--jobs 10000] [--vcs 100] [--clusters 4]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from datetime import date

import redis
from prometheus_client import CollectorRegistry, generate_latest

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, MemoryTransport
from gpuhint.lab.local.services import redis_service
from gpuhint.metrics.agent import AgentCollector, dcgm_exposition
from gpuhint.metrics.state import RedisStateCollector
from gpuhint.metrics.store import MeteredRedisStore
from gpuhint.redis.client import HintClient
from gpuhint.redis.store import RedisStore
from gpuhint.wire.contract import ClusterLoad, PriorityHint
from gpuhint.wire.keys import RedisKeys


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """(median, max) wall seconds of ``runs`` calls."""
    xs = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs), max(xs)


def hints(prefix: str, n: int, vcs: int, clusters: int) -> list[PriorityHint]:
    return [
        PriorityHint(
            job_id=f"{prefix}-{i}",
            cluster=f"c{i % clusters}",
            vc=f"vc{i % vcs}",
            num_gpus=8,
            submit_time=0,
            predicted_duration_s=100 + i,
            priority=800 + 8 * i,
            model="m",
            model_version="1",
            created_at=0,
        )
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--vcs", type=int, default=100)
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with redis_service() as (url, how):
        r = redis.Redis.from_url(url)
        rows = []
        # flush cost: the same ops through the plain and the metered store, alternating
        # so that load from other processes hits both alike
        stores = {
            name: cls(r, RedisKeys(f"bench-{name}"))
            for name, cls in (("plain", RedisStore), ("metered", MeteredRedisStore))
        }
        batches = {name: hints(name, args.jobs, args.vcs, args.clusters) for name in stores}
        times: dict[str, list[float]] = {name: [] for name in stores}
        for _ in range(max(3, args.runs // 4)):
            for name, store in stores.items():
                t = time.perf_counter()
                for h in batches[name]:
                    store.put_hint(h)
                store.flush()
                times[name].append(time.perf_counter() - t)
        for name, xs in times.items():
            what = f"put + flush {args.jobs:,} hints, {name} store"
            rows.append((what, statistics.median(xs), max(xs)))
        keys = RedisKeys("bench-metered")
        store = MeteredRedisStore(r, keys)
        for c in range(args.clusters):
            store.put_load(
                ClusterLoad(cluster=f"c{c}", time=0, total_nodes=64, active_nodes=60, used_nodes=40)
            )
        store.flush()
        reg = CollectorRegistry()
        reg.register(RedisStateCollector(HintClient(r, key_prefix=keys.prefix), cache_s=0))
        med, worst = timed(lambda: generate_latest(reg), args.runs)
        n_queues = min(args.vcs, args.jobs) * args.clusters
        rows.append((f"scrape Redis state ({n_queues} queues, {args.jobs:,} jobs)", med, worst))

        agent = NodeAgent(
            nvml=FakeNvml("steady"), publisher=BufferedPublisher(MemoryTransport()), cluster="c",
            node="n1",
        )  # fmt: skip
        agent.start()
        agent.tick()
        areg = CollectorRegistry()
        areg.register(AgentCollector(agent))
        med, worst = timed(lambda: dcgm_exposition(areg), args.runs * 10)
        rows.append(("scrape agent, 8 GPUs (DCGM names)", med, worst))
        agent.close()

    print(f"## bench_metrics ({date.today()}, {platform.machine()}, Python "
          f"{platform.python_version()}, Redis: {how})")  # fmt: skip
    print("| what | median | max |\n|---|---|---|")
    for what, med, worst in rows:
        print(f"| {what} | {med * 1000:,.1f} ms | {worst * 1000:,.1f} ms |")


if __name__ == "__main__":
    main()
