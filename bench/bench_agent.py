"""Node agent overhead: CPU share of one core and peak RSS, 8 fake GPUs sampled at 1 Hz.

    python bench/bench_agent.py [--seconds 60] [--interval 1] [--scenario steady]

Runs the real agent loop (sampler, encoding, bounded publisher) in this process for
``--seconds`` against the in-memory transport (counting only), or against a real broker
when ``GPUHINT_BENCH_KAFKA=HOST:PORT`` is set. CPU is user+system time of this process
over the loop's wall time (getrusage); RSS is the process's peak (ru_maxrss), so it
includes the interpreter and every import. Target: < 1% of one core, < 60 MB.

The fake NVML answers from memory; the real library makes one driver call per field,
so on a GPU host the CPU share is higher by that cost (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.fake_nvml import FakeNvml
from agents.node_agent import NodeAgent
from agents.publisher import BufferedPublisher, KafkaTransport, MemoryTransport, Transport
from gpuhint.wire.topics import Topics


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--scenario", default="steady", help="fake NVML scenario (8 GPUs)")
    args = ap.parse_args()

    kafka = os.environ.get("GPUHINT_BENCH_KAFKA")
    transport: Transport
    if kafka:
        from gpuhint.wire.config import load_settings
        from streams.kafka_io import ensure_topics, kafka_client_config

        topics = Topics(f"bench{int(time.time())}")
        sec = kafka_client_config(load_settings())  # GPUHINT_KAFKA_SECURITY_* etc.
        transport = KafkaTransport(
            kafka, on_connect=lambda: ensure_topics(kafka, topics, 1, security=sec), **sec
        )
    else:
        topics = Topics()
        transport = MemoryTransport(keep=False)
    publisher = BufferedPublisher(transport)
    agent = NodeAgent(
        nvml=FakeNvml(args.scenario),
        publisher=publisher,
        cluster="bench",
        node="gpu01",
        topics=topics,
        interval_s=args.interval,
    )
    agent.start()
    gpus = agent.nvml.device_count() if agent.nvml else 0
    ticks = max(1, round(args.seconds / args.interval))
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    agent.run(threading.Event(), max_ticks=ticks)
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    lost = agent.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    result = {
        "ticks": ticks,
        "interval_s": args.interval,
        "gpus": gpus,
        "transport": f"kafka {kafka}" if kafka else "memory",
        "records_sent": publisher.sent,
        "records_lost": lost + publisher.dropped,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 3),
        "cpu_pct_of_one_core": round(100 * cpu / wall, 3),
        "cpu_ms_per_tick": round(1000 * cpu / ticks, 2),
        "peak_rss_mb": round(r1.ru_maxrss / 1024, 1),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpu",
    }
    print(json.dumps(result))
    ok = result["cpu_pct_of_one_core"] < 1.0 and result["peak_rss_mb"] < 60
    print(
        f"{'OK' if ok else 'OVER TARGET'}: {result['cpu_pct_of_one_core']}% of one core, "
        f"{result['peak_rss_mb']} MB peak RSS (targets < 1%, < 60 MB)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
