"""Gauges of what Redis holds now: queue lengths, cluster nodes, the latest power advice.

Every worker (and ``gpuhint metrics`` readers) sees the same Redis, so these are the
same from any of them: aggregate with ``max`` in PromQL. Read at scrape time, at most
once per ``cache_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuhint.redis.client import HintClient, UnreadableValue, as_text, change_time
from gpuhint.wire.contract import ClusterLoad, PowerAdvisory

log = logging.getLogger(__name__)
_V = TypeVar("_V")

HINT_TYPES = ("hint", "hint_updated")
NEWEST_SCAN = 5000
"""Change-stream entries read, newest first, for each cluster's newest hint."""


def newest_hint_times(client: HintClient, scan: int = NEWEST_SCAN) -> dict[str, float]:
    """Each cluster's newest hint (written or updated) as UNIX seconds, from the newest
    ``scan`` entries of the change stream (a cluster with none among them is absent)."""
    out: dict[str, float] = {}
    last, seen = "+", 0
    while seen < scan:
        rows: Any = client.r.xrevrange(client.keys.changes, max=last, count=500)
        if last != "+":
            rows = rows[1:]  # the bound itself was seen
        if not rows:
            break
        for raw_id, raw_fields in rows:
            seen += 1
            fields = {as_text(k): as_text(v) for k, v in raw_fields.items()}
            cluster = fields.get("cluster")
            if fields.get("type") in HINT_TYPES and cluster and cluster not in out:
                out[cluster] = change_time(as_text(raw_id))
        last = as_text(rows[-1][0])
    return out


class RedisStateCollector(Collector):
    """Scans ``{p}:v1:queue:*`` (ZCARD) and reads each cluster's load and advice."""

    def __init__(self, client: HintClient, cache_s: float = 5.0) -> None:
        self.client = client
        self.cache_s = cache_s
        self._lock = threading.Lock()
        self._at = -1e18
        self._metrics: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if time.monotonic() - self._at >= self.cache_s:
                self._metrics = self._read()
                self._at = time.monotonic()
            yield from self._metrics

    def _read(self) -> list[Metric]:
        c = self.client
        up = GaugeMetricFamily(
            "gpuhint_redis_up", "1 when the last scrape could read Redis, else 0."
        )
        queue = GaugeMetricFamily(
            "gpuhint_queue_length",
            "Jobs waiting with a hint, per VC queue.",
            labels=["cluster", "vc"],
        )
        nodes = GaugeMetricFamily(
            "gpuhint_cluster_nodes",
            "Nodes of a cluster by state (total, powered_on, used, off) from its latest load.",
            labels=["cluster", "state"],
        )
        busy = GaugeMetricFamily(
            "gpuhint_cluster_gpus", "GPUs of a cluster (total, busy).", labels=["cluster", "state"]
        )
        advice = GaugeMetricFamily(
            "gpuhint_power_advice_nodes",
            "Nodes named by the latest cluster power advice, by action.",
            labels=["cluster", "action"],
        )
        forecast = GaugeMetricFamily(
            "gpuhint_power_forecast_nodes",
            "The CES forecast of nodes needed (point and upper band) in the latest advice.",
            labels=["cluster", "bound"],
        )
        saving = GaugeMetricFamily(
            "gpuhint_power_advice_energy_saved_kwh",
            "Energy the latest advice expects to save over its horizon (estimate).",
            labels=["cluster"],
        )
        newest = GaugeMetricFamily(
            "gpuhint_newest_hint_timestamp_seconds",
            "When the cluster's newest hint was written or updated (UNIX seconds, from the "
            "Redis change stream): time() minus it is the hints' age.",
            labels=["cluster"],
        )
        try:
            root = c.keys.root
            qprefix = f"{root}:queue:"
            qkeys = sorted(as_text(k) for k in c.r.scan_iter(match=qprefix + "*", count=500))
            pipe = c.r.pipeline(transaction=False)
            for k in qkeys:
                pipe.zcard(k)
            sizes: list[Any] = pipe.execute() if qkeys else []
            for key, n in zip(qkeys, sizes, strict=True):
                cluster, _, vc = key[len(qprefix) :].partition(":")
                queue.add_metric([cluster, vc], float(n))
            lprefix = f"{root}:load:"
            for key in sorted(as_text(k) for k in c.r.scan_iter(match=lprefix + "*", count=500)):
                cluster = key[len(lprefix) :]
                load: ClusterLoad | None = _readable(c.load, cluster)
                if load is not None:
                    for state, v in (
                        ("total", load.total_nodes),
                        ("powered_on", load.active_nodes),
                        ("used", load.used_nodes),
                        ("off", max(0, load.total_nodes - load.active_nodes)),
                    ):
                        nodes.add_metric([cluster, state], float(v))
                    busy.add_metric([cluster, "total"], float(load.total_gpus))
                    busy.add_metric([cluster, "busy"], float(load.busy_gpus))
                adv: PowerAdvisory | None = _readable(c.cluster_advice, cluster)
                if adv is not None:
                    advice.add_metric([cluster, adv.action.value], float(adv.count))
                    if adv.forecast_nodes is not None:
                        forecast.add_metric([cluster, "point"], adv.forecast_nodes)
                    if adv.forecast_upper_nodes is not None:
                        forecast.add_metric([cluster, "upper"], adv.forecast_upper_nodes)
                    if adv.est_energy_saved_kwh is not None:
                        saving.add_metric([cluster], adv.est_energy_saved_kwh)
            for cluster, at in sorted(newest_hint_times(c).items()):
                newest.add_metric([cluster], at)
            up.add_metric([], 1.0)
        except Exception:  # Redis down (or a bug): report, do not fail the scrape
            up.add_metric([], 0.0)
            return [up]
        return [up, queue, nodes, busy, advice, forecast, saving, newest]


def _readable(read: Callable[[str], _V | None], cluster: str) -> _V | None:
    """``read(cluster)``, or None for a value another schema version wrote (or junk):
    one cluster's figures left out, not Redis reported down."""
    try:
        return read(cluster)
    except UnreadableValue as exc:
        log.debug("metrics: %s", exc)
        return None
