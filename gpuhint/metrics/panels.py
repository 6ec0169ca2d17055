"""The Grafana dashboard's panels: what each shows, as query recipes
(:mod:`gpuhint.metrics.promql`). :mod:`gpuhint.metrics.dashboard` writes them as Grafana
JSON and draws them from a recorded scrape series."""

from __future__ import annotations

from dataclasses import dataclass

from gpuhint.metrics.promql import Age, Level, Query, Rate, RatioOfRates


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    stack: bool = False


PANELS: tuple[Panel, ...] = (
    Panel(
        "Newest hint age (s)",
        "s",
        (
            Age(
                "gpuhint_newest_hint_timestamp_seconds",
                by=("cluster",),
                filters=("cluster",),
                legend="{{cluster}} (Redis)",
            ),
            Level(
                "gpuhint_applier_hint_age_seconds",
                by=("applier",),
                agg="max",
                legend="{{applier}} saw at its last pass",
            ),
        ),
        "Seconds since the cluster's newest hint was written or updated: it grows while "
        "jobs arrive and no hint follows (worker, agent or Kafka down). Appliers fade "
        "hints older than their stale_after to the neutral priority.",
    ),
    Panel(
        "Worker up and lag",
        "short",
        (
            Level("gpuhint_worker_ready", legend="workers ready (consuming)"),
            Level("gpuhint_kafka_consumer_lag", legend="lag, all partitions (messages)"),
        ),
        "Workers whose /healthz says ready, and the messages they have still to read.",
    ),
    Panel(
        "Applier last pass age (s)",
        "s",
        (
            Age(
                "gpuhint_applier_last_pass_timestamp_seconds",
                by=("applier",),
                legend="{{applier}}",
            ),
        ),
        "Seconds since each applier (slurm, slurm-power, kueue) finished a pass: it should "
        "stay under a few times the applier's interval.",
    ),
    Panel(
        "Applier last pass result",
        "short",
        (
            Level(
                "gpuhint_applier_last_pass_changed",
                by=("applier",),
                agg="max",
                legend="{{applier}} jobs changed",
            ),
            Level(
                "gpuhint_applier_hints_fresh",
                by=("applier",),
                agg="max",
                legend="{{applier}} hints fresh (1/0)",
            ),
            Level(
                "gpuhint_applier_redis_up",
                by=("applier",),
                agg="max",
                legend="{{applier}} read Redis (1/0)",
            ),
            Rate(
                "gpuhint_applier_errors_total",
                by=("applier", "kind"),
                legend="{{applier}} errors/min: {{kind}}",
                scale=60,
            ),
        ),
        "What the last pass did: jobs changed, whether its hints were fresh and read "
        "from Redis, and failed calls.",
    ),
    Panel(
        "Agents' last report age (s)",
        "s",
        (
            Age("gpuhint_agent_last_tick_timestamp_seconds", by=("node",), legend="{{node}}"),
            Level("gpuhint_agent_buffered_records", legend="records buffered (all agents)"),
        ),
        "Seconds since each node agent last sampled and handed its report on; records "
        "buffered grow while Kafka does not take them.",
    ),
    Panel(
        "Job events in (per s)",
        "ops",
        (Rate("gpuhint_job_events_total", by=("phase",), legend="{{phase}}"),),
        "Job events the hint engine applied, by phase: the worker's throughput.",
    ),
    Panel(
        "Kafka messages in (per s)",
        "ops",
        (Rate("gpuhint_kafka_messages_in_total", by=("topic",), legend="{{topic}}"),),
        "Every message the worker read, by topic (job events, node status, telemetry).",
    ),
    Panel(
        "Consumer lag (messages)",
        "short",
        (
            Level(
                "gpuhint_kafka_consumer_lag",
                by=("topic", "partition"),
                agg="max",
                legend="{{topic}}[{{partition}}]",
            ),
        ),
        "High watermark minus committed offset, per partition.",
    ),
    Panel(
        "Prediction error: mean |log(predicted/actual)|",
        "short",
        (
            RatioOfRates(
                "gpuhint_prediction_abs_log_error_sum",
                "gpuhint_prediction_abs_log_error_count",
                legend="mean |log error|",
            ),
        ),
        "Hint quality over time: 0.69 means off by a factor of 2 on average.",
    ),
    Panel(
        "Queue length per VC",
        "short",
        (
            Level(
                "gpuhint_queue_length",
                by=("cluster", "vc"),
                agg="max",
                legend="{{cluster}}/{{vc}}",
                filters=("cluster", "vc"),
            ),
        ),
        "Jobs waiting with a hint in each VC's queue (read from Redis).",
        stack=True,
    ),
    Panel(
        "Hints written / removed (per s)",
        "ops",
        (
            Rate("gpuhint_hints_written_total", legend="written"),
            Rate("gpuhint_hints_updated_total", legend="updated"),
            Rate("gpuhint_hints_removed_total", legend="removed"),
        ),
    ),
    Panel(
        "Nodes by power state",
        "short",
        (
            Level(
                "gpuhint_cluster_nodes",
                by=("cluster", "state"),
                agg="max",
                legend="{{cluster}} {{state}}",
                filters=("cluster",),
            ),
        ),
        "From each cluster's latest load: total, powered on, used, off.",
    ),
    Panel(
        "Power advisories (per min)",
        "short",
        (
            Rate(
                "gpuhint_advisories_total",
                by=("action",),
                where={"scope": "cluster"},
                legend="{{action}}",
                scale=60,
            ),
        ),
        "Cluster-level advisories written, by action.",
        stack=True,
    ),
    Panel(
        "Energy saved (kWh, estimated)",
        "kwatth",
        (
            Level(
                "gpuhint_ces_energy_saved_kwh_total",
                by=("cluster",),
                legend="{{cluster}}",
                filters=("cluster",),
            ),
        ),
        "Nodes off x GPUHINT_CES_WATTS_PER_NODE x slot, summed.",
    ),
    Panel(
        "Job-aware CES: nodes and queue",
        "short",
        (
            Level(
                "gpuhint_ces_jobs_nodes",
                by=("cluster", "state"),
                legend="{{cluster}} nodes {{state}}",
                filters=("cluster",),
            ),
            Level(
                "gpuhint_ces_jobs_waiting",
                by=("cluster",),
                legend="{{cluster}} jobs waiting",
                filters=("cluster",),
            ),
        ),
        "With GPUHINT_CES_POLICY=jobs: each cluster's nodes by power state (off, booting, "
        "on) as the job-aware CES sees them, and the jobs in its queue. Booting nodes "
        "while jobs wait are the delay an operator pays for the energy saved.",
    ),
    Panel(
        "Job-aware CES: nodes changed (per hour)",
        "short",
        (
            Rate(
                "gpuhint_ces_jobs_nodes_changed_total",
                by=("action",),
                legend="{{action}}",
                scale=3600,
            ),
        ),
        "Nodes the job-aware CES decided to power down or wake: how often nodes cycle.",
        stack=True,
    ),
    Panel(
        "Dead letters (per min)",
        "short",
        (Rate("gpuhint_dead_letters_total", by=("reason",), legend="{{reason}}", scale=60),),
        stack=True,
    ),
    Panel(
        "Redis and Kafka errors (per min)",
        "short",
        (
            Rate("gpuhint_redis_errors_total", legend="redis", scale=60),
            Rate("gpuhint_kafka_errors_total", by=("op",), legend="kafka {{op}}", scale=60),
            Rate("gpuhint_agent_kafka_errors_total", legend="agent kafka", scale=60),
        ),
    ),
    Panel(
        "GPU utilization (DCGM)",
        "percent",
        (Level("DCGM_FI_DEV_GPU_UTIL", by=("Hostname",), agg="avg", legend="{{Hostname}}"),),
        "Mean over each host's GPUs, from the node agents (dcgm-exporter names).",
    ),
    Panel(
        "GPU power (DCGM, W)",
        "watt",
        (Level("DCGM_FI_DEV_POWER_USAGE", by=("Hostname",), legend="{{Hostname}}"),),
        stack=True,
    ),
    Panel(
        "Applier actions and refusals (per min)",
        "short",
        (
            Rate(
                "gpuhint_applier_actions_total",
                by=("applier", "action"),
                legend="{{applier}} {{action}}",
                scale=60,
            ),
            Rate(
                "gpuhint_applier_refusals_total",
                by=("applier", "reason"),
                legend="{{applier}} refused: {{reason}}",
                scale=60,
            ),
        ),
    ),
)
