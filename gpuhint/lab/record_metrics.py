"""Record a real scrape series for the dashboard picture: the whole pipeline, scraped.

Starts a local Kafka and Redis (or uses ``GPUHINT_TEST_KAFKA_BOOTSTRAP`` /
``GPUHINT_TEST_REDIS_URL``), a worker and four fake-NVML node agents with ``/metrics``,
plus twelve idle hosts that obey the power advice (told to power down, they fall
silent), replays the shipped Philly excerpt paced over the run, plants a few malformed
messages, and scrapes every process every ``--interval`` seconds. Only the metrics the dashboard
draws are kept (JSON lines, gzipped).

    python -m gpuhint.lab.record_metrics --seconds 480 --interval 3 \\
        --out docs/img/dashboard-series.jsonl.gz
    python -m gpuhint.metrics.dashboard render docs/img/dashboard-series.jsonl.gz \\
        docs/img/dashboard.png
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from gpuhint.lab.local.scrape import get
from gpuhint.lab.local.services import free_port, kafka_service, redis_service, stop_processes
from gpuhint.metrics.dashboard import PANELS, Age, Level, Rate, RatioOfRates

TRACE = Path(__file__).resolve().parents[1] / "data" / "philly_excerpt.json"
TRACE_SPAN_S = 778 * 3600.0  # first to last event of the excerpt
AGENTS = (("gpu-a", "busy"), ("gpu-b", "steady"), ("gpu-c", "idle"), ("gpu-d", "idle"))
IDLE_NODES = tuple(f"idle-{i:02d}" for i in range(1, 13))


def wanted_metrics() -> set[str]:
    names: set[str] = set()
    for p in PANELS:
        for q in p.queries:
            if isinstance(q, Rate | Level | Age):
                names.add(q.metric)
            elif isinstance(q, RatioOfRates):
                names |= {q.num, q.den}
    return names


def _spawn(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuhint", *args], env=env, stdout=fh, stderr=fh
        )


def _plant_bad_messages(bootstrap: str, prefix: str, n: int) -> None:
    from kafka import KafkaProducer

    from gpuhint.wire.topics import Topics, job_key

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    topic = Topics(prefix).job_events
    for i in range(n):
        value = b"{not json" if i % 2 == 0 else b'{"schema_version": 7, "kind": "job"}'
        p.send(topic, key=job_key("philly", "vc-x"), value=value)
    p.flush(30)
    p.close()


def _obedient_idle_nodes(
    bootstrap: str, redis_url: str, prefix: str, stop: threading.Event
) -> None:
    """Idle GPU hosts that follow the advice: a node told to power down falls silent
    (the worker counts a silent node as off), one told to wake reports again."""
    from kafka import KafkaProducer

    from gpuhint.redis.client import HintClient
    from gpuhint.wire.contract import NodeStatus, PowerAction, encode_message
    from gpuhint.wire.topics import Topics, node_key

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    client = HintClient.from_url(redis_url, key_prefix=prefix)
    topic = Topics(prefix).node_status
    off: set[str] = set()
    try:
        while not stop.wait(1.0):
            for node in IDLE_NODES:
                with contextlib.suppress(Exception):
                    adv = client.node_advice("philly", node)
                    if adv is not None and adv.action is PowerAction.POWER_DOWN:
                        off.add(node)
                    elif adv is not None and adv.action is PowerAction.WAKE:
                        off.discard(node)
                if node not in off:
                    st = NodeStatus(cluster="philly", node=node, time=time.time(), num_gpus=8)
                    producer.send(topic, key=node_key("philly", node), value=encode_message(st))
            producer.flush(10)
    finally:
        producer.close()
        client.close()


def record(out: Path, seconds: float, interval: float, workdir: Path, slot_s: int = 2) -> int:
    """Run the pipeline for ``seconds``, scraping every ``interval``; return the rounds.

    CES needs ``warmup_slots`` (144) slots of history before it advises a power-down,
    so ``slot_s=2`` sees power-downs after about 5 minutes.
    """
    from tqdm import tqdm

    keep = wanted_metrics()
    log = workdir / "processes.log"
    procs: list[subprocess.Popen[bytes]] = []
    rounds = 0
    with contextlib.ExitStack() as stack:
        bootstrap, _ = stack.enter_context(kafka_service())
        redis_url, _ = stack.enter_context(redis_service())
        prefix = f"rec{int(time.time())}"
        env = dict(
            os.environ,
            GPUHINT_KAFKA_BOOTSTRAP=bootstrap,
            GPUHINT_REDIS_URL=redis_url,
            GPUHINT_TOPIC_PREFIX=prefix,
            GPUHINT_KEY_PREFIX=prefix,
            GPUHINT_APP_ID=f"{prefix}-worker",
            GPUHINT_PARTITIONS="4",
            GPUHINT_STATE_DIR=str(workdir / "state"),
            GPUHINT_CLUSTER="philly",
            GPUHINT_CES_SLOT_S=str(slot_s),
            GPUHINT_METRICS_HOST="127.0.0.1",
            PYTHONUNBUFFERED="1",
        )
        try:
            sources = _start_worker_and_agents(env, log, procs)
            speed = TRACE_SPAN_S / (seconds * 0.8)
            procs.append(
                _spawn(["replay", str(TRACE), "--speed", f"{speed:.0f}", "--no-progress"], env, log)
            )
            stop = threading.Event()
            nodes = threading.Thread(
                target=_obedient_idle_nodes, args=(bootstrap, redis_url, prefix, stop), daemon=True
            )
            nodes.start()
            stack.callback(nodes.join, 15)
            stack.callback(stop.set)
            t0 = time.monotonic()
            planted = 0
            with gzip.open(out, "wt") as fh:
                for k in tqdm(range(int(seconds / interval) + 1), desc="scrapes", unit="scrape"):
                    due = t0 + k * interval
                    time.sleep(max(0.0, due - time.monotonic()))
                    if planted < 3 and time.monotonic() - t0 > seconds * (planted + 1) / 4:
                        _plant_bad_messages(bootstrap, prefix, 2)
                        planted += 1
                    _scrape(sources, keep, k, time.time(), fh)
                    rounds += 1
        finally:
            stop_processes(procs)
    return rounds


def _start_worker_and_agents(
    env: dict[str, str], log: Path, procs: list[subprocess.Popen[bytes]]
) -> dict[str, str]:
    """Start the worker and the fake-NVML agents (appended to ``procs``); wait until the
    worker is ready. Returns each one's metrics address by name."""
    sources: dict[str, str] = {}
    port = free_port()
    procs.append(_spawn(["worker"], dict(env, GPUHINT_METRICS_PORT=str(port)), log))
    sources["worker"] = f"http://127.0.0.1:{port}"
    for node, scenario in AGENTS:
        port = free_port()
        args = ["agent", "--nvml", "fake", "--scenario", scenario, "--node", node]
        agent_env = dict(env, GPUHINT_METRICS_PORT=str(port), GPUHINT_CLUSTER="philly")
        procs.append(_spawn([*args, "--interval", "1"], agent_env, log))
        sources[node] = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if get(f"{sources['worker']}/healthz", timeout=2)[0] == 200:
                break
        time.sleep(0.5)
    else:
        raise RuntimeError(f"the worker never got ready; see {log}")
    return sources


def _scrape(sources: dict[str, str], keep: set[str], k: int, now: float, fh: IO[str]) -> None:
    """One round: every source's wanted samples as one JSON line each (a source that
    does not answer is skipped)."""
    from prometheus_client.parser import text_string_to_metric_families

    for name, base in sources.items():
        try:
            status, text = get(f"{base}/metrics", timeout=5)
        except OSError:
            continue
        if status != 200:
            continue
        samples = [
            [s.name, s.labels, s.value]
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name in keep
        ]
        rec = {"round": k, "t": now, "source": name, "samples": samples}
        fh.write(json.dumps(rec, separators=(",", ":")) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpuhint.lab.record_metrics",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    ap.add_argument("--out", type=Path, required=True, help="series to write (.jsonl.gz)")
    ap.add_argument("--seconds", type=float, default=240.0, help="how long to record (240)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between scrapes (2)")
    ap.add_argument(
        "--slot-s", type=int, default=2, help="CES slot (2 s: power-downs after ~5 min warm-up)"
    )
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.interval <= 0 or args.slot_s < 1:
        print("--seconds and --interval must be > 0, --slot-s >= 1", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuhint-record-") as tmp:
        try:
            n = record(args.out, args.seconds, args.interval, Path(tmp), args.slot_s)
        except Exception as exc:
            log = Path(tmp) / "processes.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            print(f"recording failed: {type(exc).__name__}: {exc}\n{tail}", file=sys.stderr)
            return 1
    print(f"wrote {args.out}: {n} scrape rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
