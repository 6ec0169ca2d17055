"""The node agent's metrics: its GPUs under DCGM exporter names, and its own health.

GPU metrics use dcgm-exporter's names, units and labels (``gpu``, ``UUID``, ``device``,
``Hostname``), so dashboards built for dcgm-exporter work on gpuhint agents unchanged;
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is a counter exposed without a ``_total``
suffix, as dcgm-exporter does. Values are the agent's newest sample (read at scrape).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuhint.metrics.server import MetricsServer
from gpuhint.wire.contract import GpuSample

GPU_LABELS = ["gpu", "UUID", "device", "Hostname"]

# (DCGM name, Prometheus type, help as dcgm-exporter words it)
_DCGM: list[tuple[str, str, str]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons (bitmask)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
]
DCGM_NAMES = tuple(name for name, _, _ in _DCGM)
_DCGM_COUNTERS = tuple(name for name, kind, _ in _DCGM if kind == "counter")


def _value(name: str, s: GpuSample) -> float | None:
    """The sample's value for one DCGM field, or None when the GPU did not report it."""
    v: float | None
    if name == "DCGM_FI_DEV_GPU_UTIL":
        v = s.gpu_util_pct
    elif name == "DCGM_FI_DEV_MEM_COPY_UTIL":
        v = s.mem_util_pct
    elif name == "DCGM_FI_DEV_FB_USED":
        v = s.mem_used_mb
    elif name == "DCGM_FI_DEV_FB_FREE":
        v = (
            max(0.0, s.mem_total_mb - s.mem_used_mb)
            if s.mem_total_mb is not None and s.mem_used_mb is not None
            else None
        )
    elif name == "DCGM_FI_DEV_POWER_USAGE":
        v = s.power_w
    elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
        v = s.energy_mj
    elif name == "DCGM_FI_DEV_GPU_TEMP":
        v = s.temperature_c
    elif name == "DCGM_FI_DEV_SM_CLOCK":
        v = s.sm_clock_mhz
    elif name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS":
        v = None if s.throttle_reasons is None else float(s.throttle_reasons)
    elif name == "DCGM_FI_DEV_XID_ERRORS":
        v = float(s.xid_errors[-1]) if s.xid_errors else 0.0
    elif name == "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":
        v = None if s.ecc_corrected is None else float(s.ecc_corrected)
    else:  # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
        v = None if s.ecc_uncorrected is None else float(s.ecc_uncorrected)
    return v


class AgentCollector(Collector):
    """DCGM-named GPU metrics and ``gpuhint_agent_*`` metrics of one :class:`NodeAgent`."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        result = a.last_sample
        samples: list[GpuSample] = list(result.gpu_samples) if result is not None else []
        for name, kind, doc in _DCGM:
            fam: Metric
            if kind == "counter":
                fam = Metric(name, doc, "counter")
            else:
                fam = GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for s in samples:
                v = _value(name, s)
                if v is None:
                    continue
                labels = {
                    "gpu": str(s.gpu_index),
                    "UUID": s.uuid or "",
                    "device": f"nvidia{s.gpu_index}",
                    "Hostname": s.node,
                }
                fam.add_sample(name, labels, v)
            yield fam

        pub = a.publisher
        yield CounterMetricFamily(
            "gpuhint_agent_ticks", "Sampling rounds done.", value=float(a.ticks)
        )
        yield CounterMetricFamily(
            "gpuhint_agent_records_sent", "Records sent to Kafka.", value=float(pub.sent)
        )
        yield CounterMetricFamily(
            "gpuhint_agent_records_dropped",
            "Records dropped because the buffer was full (Kafka unreachable too long).",
            value=float(pub.dropped),
        )
        yield CounterMetricFamily(
            "gpuhint_agent_kafka_errors",
            "Failed send attempts to Kafka.",
            value=float(pub.failures),
        )
        yield CounterMetricFamily(
            "gpuhint_agent_rosters_sent",
            "Rounds of job rosters published (each VC's unfinished jobs; 0 without a "
            "scheduler feed, with --roster-every 0, or while a feed cannot be read).",
            value=float(getattr(a, "rosters_sent", 0)),
        )
        yield GaugeMetricFamily(
            "gpuhint_agent_buffered_records",
            "Records waiting to be sent.",
            value=float(pub.pending),
        )
        last = GaugeMetricFamily(
            "gpuhint_agent_last_tick_timestamp_seconds",
            "When the agent last sampled and handed its report to the publisher (UNIX "
            "seconds); gpuhint_agent_buffered_records says whether reports reach Kafka.",
            labels=["node"],
        )
        if a.last_tick_at is not None:
            last.add_metric([str(a.node)], float(a.last_tick_at))
        yield last
        if result is not None:
            st = result.status
            gpus = GaugeMetricFamily(
                "gpuhint_agent_gpus", "GPUs of this node by state.", labels=["state"]
            )
            unhealthy = sum(1 for h in st.gpu_health if not h.ok)
            gpus.add_metric(["total"], float(st.num_gpus))
            gpus.add_metric(["busy"], float(st.busy_gpus))
            gpus.add_metric(["unhealthy"], float(unhealthy))
            yield gpus
        feeds = GaugeMetricFamily(
            "gpuhint_agent_scheduler_failures",
            "Consecutive failed reads of a scheduler source (0: the last read worked).",
            labels=["source"],
        )
        for f in a.feeds:
            feeds.add_metric([f.name], float(f.failures))
        yield feeds


def agent_health(agent: Any, now: float | None = None) -> tuple[bool, str]:
    """Ready once a tick ran within three intervals."""
    last = agent.last_tick_at
    if last is None:
        return False, "starting: no sample yet"
    age = (time.time() if now is None else now) - last
    if age > 3 * agent.interval_s + 5:
        return False, f"last tick {age:.0f} s ago (interval {agent.interval_s:g} s)"
    return True, f"sampled {age:.1f} s ago, {agent.publisher.pending} record(s) buffered"


_COUNTER_HEADER = re.compile(
    r"^# (HELP|TYPE) (" + "|".join(_DCGM_COUNTERS) + r")_total ", flags=re.MULTILINE
)


def dcgm_exposition(registry: CollectorRegistry) -> bytes:
    """Prometheus text format, with DCGM counters named as dcgm-exporter names them."""
    text = generate_latest(registry).decode()
    return _COUNTER_HEADER.sub(r"# \1 \2 ", text).encode()


def start_agent_metrics(agent: Any, host: str, port: int) -> MetricsServer:
    """Serve the agent's ``/metrics`` and ``/healthz`` on ``host:port`` (raises OSError)."""
    registry = CollectorRegistry()
    registry.register(AgentCollector(agent))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return MetricsServer(
        registry,
        health=lambda: agent_health(agent),
        host=host,
        port=port,
        exposition=dcgm_exposition,
    ).start()
