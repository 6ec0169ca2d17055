"""``gpuhint status``: is it working? One screen, ``--json``, and an exit code to alert on."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gpuhint.cli.common import UserError, add_config_args, human_duration, settings_from

DESCRIPTION = """\
Checks the whole chain for one cluster and says, in one screen, whether hints are being
made and applied: Kafka (reachable; the worker group's members and lag), Redis
(reachable), the newest hint, the newest job event and node report the agents sent,
and each applier's last pass (gpuhint/redis/applier_status.py).

exit codes (for a monitoring system; docs/operations.md, "Is it working?"):
  0  healthy
  1  degraded: hints are made but something lags or failed (the worker behind by more
     than --max-lag events, job events waiting for the worker while newer than the
     newest hint by --max-hint-lag,
     an applier's last pass failed (or, Kueue, some of its patches did) or is older
     than three intervals, no node report
     for --max-agent-age while agents did report before)
  2  down: Redis or Kafka unreachable, or no worker in the group (no hints are made)

examples:
  gpuhint status --cluster prod
  gpuhint status --cluster prod --json | jq .checks.worker
  gpuhint status --no-kafka            # a site without Kafka (only Redis and appliers)
"""

OK, WARN, FAIL, NONE = "ok", "warn", "fail", "none"
LEVELS = {0: "healthy", 1: "degraded", 2: "down"}
HINT_TYPES = ("hint", "hint_updated")


@dataclass
class Check:
    """One line of the screen: ``state`` is ok / warn (degraded) / fail (down) / none."""

    state: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "status",
        help="is it working? Kafka, Redis, worker lag, hint age, appliers, agents",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", help="cluster (else GPUHINT_CLUSTER)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka (else GPUHINT_KAFKA_BOOTSTRAP)")
    p.add_argument("--redis-url", metavar="URL", help="Redis URL (else GPUHINT_REDIS_URL)")
    p.add_argument("--no-kafka", action="store_true", help="skip Kafka and the worker")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per service (5)")
    p.add_argument(
        "--max-lag", type=int, default=10_000, metavar="N", help="worker lag, events (10,000)"
    )
    p.add_argument(
        "--max-hint-lag",
        type=float,
        default=300.0,
        metavar="S",
        help="job events newer than the newest hint by this: degraded (300)",
    )
    p.add_argument(
        "--max-agent-age",
        type=float,
        default=300.0,
        metavar="S",
        help="no node report for this long: degraded (300)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_config_args(p)
    p.set_defaults(handler=run)


def _why(exc: BaseException) -> str:
    """``Type: message``, without the type twice (kafka-python repeats it)."""
    text, kind = str(exc), type(exc).__name__
    return text if text.startswith(kind) else f"{kind}: {text}"


def _where(url: str) -> str:
    """A Redis URL without its password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path}"


def check_redis(url: str, prefix: str, cluster: str, timeout_s: float) -> tuple[Check, Any]:
    """Ping Redis; the open client (None when unreachable) for the other checks."""
    import redis

    from gpuhint.redis.client import HintClient

    try:
        client = HintClient.from_url(url, key_prefix=prefix, socket_timeout=timeout_s)
    except ValueError as exc:
        raise UserError(f"bad Redis URL: {exc}") from None
    t0 = time.perf_counter()
    try:
        client.r.ping()
    except redis.RedisError as exc:
        client.close()
        return Check(FAIL, f"{_where(url)} unreachable: {_why(exc)}"), None
    ms = (time.perf_counter() - t0) * 1000
    return Check(OK, f"{_where(url)} answers in {ms:,.0f} ms", {"latency_ms": ms}), client


def kafka_facts(settings: Any, timeout_s: float) -> dict[str, Any]:
    """Topics, the worker group (state, members, lag) and the newest record time of the
    job-event and node-status topics; raises ``KafkaError`` / ``OSError`` if unreachable."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec

    from streams.kafka_io import kafka_client_config

    ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap,
        client_id="gpuhint-status",
        request_timeout_ms=ms,
        bootstrap_timeout_ms=ms,
        **kafka_client_config(settings),
    )
    try:
        topics = settings.topics
        existing = set(admin.list_topics())
        ours = [t for t in (topics.job_events, topics.node_status) if t in existing]
        dead = [topics.dead_letter] if topics.dead_letter in existing else []
        all_tps = [
            TopicPartition(
                d.get("name") or d.get("topic"), p.get("partition_index", p.get("partition"))
            )
            for d in admin.describe_topics(ours + dead)
            for p in d["partitions"]
        ]
        tps = [tp for tp in all_tps if tp.topic in ours]  # the dead letters: no consumer
        ends = admin.list_partition_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
        newest = admin.list_partition_offsets(dict.fromkeys(all_tps, OffsetSpec.MAX_TIMESTAMP))
        group = admin.describe_groups([settings.app_id]).get(settings.app_id, {})
        committed = admin.list_group_offsets({settings.app_id: tps}).get(settings.app_id, {})
    finally:
        admin.close()
    lag = {t: 0 for t in ours}
    for tp in tps:
        done = committed.get(tp)
        done_at = done.offset if done is not None and done.offset >= 0 else 0
        lag[tp.topic] += max(0, int(ends[tp].offset) - done_at)
    newest_ms = {t: max((newest[tp].timestamp for tp in all_tps if tp.topic == t), default=-1)
                 for t in ours + dead}  # fmt: skip
    return {
        "topics": sorted(t for t in existing if t.startswith(topics.prefix + ".")),
        "group_state": str(group.get("group_state") or group.get("state") or "unknown"),
        "members": len(group.get("members") or []),
        "lag": lag,
        "newest_ms": {t: v for t, v in newest_ms.items() if v is not None and v >= 0},
    }


def _kafka_checks(args: argparse.Namespace, settings: Any, now: float) -> dict[str, Check]:
    from kafka.errors import KafkaError

    if args.no_kafka:
        return {}
    from gpuhint.cli.worker import quiet_kafka_python

    try:
        with quiet_kafka_python():
            facts = kafka_facts(settings, args.timeout)
    except (KafkaError, OSError) as exc:
        why = f"{settings.kafka_bootstrap} unreachable: {_why(exc)}"
        return {"kafka": Check(FAIL, why), "worker": Check(NONE, "not known (Kafka)")}
    out = {
        "kafka": Check(
            OK,
            f"{settings.kafka_bootstrap}, {len(facts['topics'])} gpuhint topics",
            {"topics": facts["topics"]},
        )
    }
    lag = sum(facts["lag"].values())
    data = {"group": settings.app_id, "state": facts["group_state"], "members": facts["members"]}
    data["lag"] = lag
    if facts["members"] == 0:
        state, what = FAIL, f"group {settings.app_id}: no worker running ({facts['group_state']})"
    else:
        state = WARN if lag > args.max_lag else OK
        what = f"group {settings.app_id}: {facts['members']} member(s), {facts['group_state']}"
    out["worker"] = Check(state, f"{what}; lag {lag:,} events", data)
    topics = settings.topics
    for name, topic, limit in (
        ("job events", topics.job_events, None),
        ("agents", topics.node_status, args.max_agent_age),
    ):
        ms = facts["newest_ms"].get(topic)
        if ms is None:
            out[name] = Check(NONE, f"none yet on {topic}")
            continue
        age = now - ms / 1000
        bad = limit is not None and age > limit
        text = f"newest on {topic} {human_duration(age)} ago"
        data = {"age_s": round(age, 1), "topic": topic, "lag": facts["lag"].get(topic, 0)}
        dead_ms = facts["newest_ms"].get(topics.dead_letter)
        if limit is None and dead_ms is not None:
            data["dead_letter_age_s"] = round(now - dead_ms / 1000, 1)
        out[name] = Check(WARN if bad else OK, text, data)
    return out


def _redis_checks(client: Any, cluster: str, now: float) -> tuple[dict[str, Check], list[str]]:
    from gpuhint.redis.client import change_time

    out: dict[str, Check] = {}
    vcs = client.vcs(cluster)
    waiting = sum(int(client.r.zcard(client.keys.queue(cluster, vc))) for vc in vcs)
    newest = client.newest_change(HINT_TYPES, cluster)
    if newest is None:
        out["hints"] = Check(NONE, f"no hint yet for cluster {cluster}", {"waiting": waiting})
    else:
        age = now - change_time(newest.id)
        data = {"age_s": round(age, 1), "vcs": len(vcs), "waiting": waiting}
        text = f"newest {human_duration(age)} ago; {waiting:,} job(s) waiting in {len(vcs)} VC(s)"
        out["hints"] = Check(OK, text, data)
    for name, rec in sorted(client.applier_passes(cluster).items()):
        age = now - float(rec.get("at", 0))
        interval = float(rec.get("interval_s") or 60)
        stale = age > max(3 * interval, 120)
        result = rec.get("result") or {}
        summary = ", ".join(f"{k} {v:,}" for k, v in result.items() if isinstance(v, int))[:90]
        failed = result.get("errors")  # Kueue: patches the API server failed (403, 500...)
        if not rec.get("ok"):
            state, text = WARN, f"last pass FAILED {human_duration(age)} ago: {rec.get('error')}"
        elif isinstance(failed, int) and failed > 0:
            state = WARN
            text = f"last pass {human_duration(age)} ago: {failed:,} patch(es) failed (see its log)"
        else:
            state = WARN if stale else OK
            text = f"last pass {human_duration(age)} ago" + (" (stopped?)" if stale else "")
            text += f": {summary}" if summary else ""
        out[f"applier {name}"] = Check(state, text, {"age_s": round(age, 1), "record": rec})
    return out, client.clusters()


def assess(checks: dict[str, Check], max_hint_lag: float) -> tuple[int, list[str]]:
    """Exit code (0 healthy, 1 degraded, 2 down) and what is wrong, from the checks."""
    problems = [f"{name}: {c.detail}" for name, c in checks.items() if c.state in (WARN, FAIL)]
    code = 2 if any(c.state == FAIL for c in checks.values()) else (1 if problems else 0)
    events, hints = checks.get("job events"), checks.get("hints")
    if events is not None and "age_s" in events.data:
        hint_age = hints.data.get("age_s") if hints is not None else None
        if _hints_lag(events.data, hint_age, max_hint_lag):
            hints_said = (
                "no hint" if hint_age is None else f"newest hint {human_duration(hint_age)} old"
            )
            problems.append(f"hints: job events arrive but {hints_said}")
            code = max(code, 1)
    return code, problems


def _hints_lag(events: dict[str, Any], hint_age: float | None, max_hint_lag: float) -> bool:
    """Whether job events arrive and hints do not follow. The worker commits a job event
    only after its writes are in Redis, so with none left to handle (lag 0) and no dead
    letter since the newest hint, an old hint means nobody submitted (only starts and
    finishes came), not that hints lag behind."""
    if hint_age is not None and hint_age - events["age_s"] <= max_hint_lag:
        return False
    if events.get("lag") != 0:
        return True
    dead_age = events.get("dead_letter_age_s")
    return dead_age is not None and (hint_age is None or dead_age < hint_age)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(
        args, cluster=args.cluster, redis_url=args.redis_url, kafka_bootstrap=args.bootstrap
    )
    if args.timeout <= 0:
        raise UserError("--timeout must be > 0")
    if args.max_lag < 0 or not args.max_hint_lag >= 0:
        raise UserError("--max-lag and --max-hint-lag must be >= 0")
    now = time.time()
    url = settings.redis_url.get_secret_value()
    redis_check, client = check_redis(url, settings.key_prefix, settings.cluster, args.timeout)
    checks = _kafka_checks(args, settings, now)
    checks["redis"] = redis_check
    clusters: list[str] = []
    if client is not None:
        import redis

        try:
            more, clusters = _redis_checks(client, settings.cluster, now)
            checks.update(more)
        except redis.RedisError as exc:
            checks["redis"] = Check(FAIL, f"{_where(url)}: {type(exc).__name__}: {exc}")
        finally:
            client.close()
    code, problems = assess(checks, args.max_hint_lag)
    if clusters and settings.cluster not in clusters:
        problems.append(f"no data for cluster {settings.cluster}; known: {', '.join(clusters)}")
        code = max(code, 1)
    _print(args, settings.cluster, checks, code, problems, clusters)
    return code


def _print(
    args: argparse.Namespace,
    cluster: str,
    checks: dict[str, Check],
    code: int,
    problems: list[str],
    clusters: list[str],
) -> None:
    if args.json:
        doc = {
            "cluster": cluster,
            "status": LEVELS[code],
            "exit_code": code,
            "checks": {k: asdict(c) for k, c in checks.items()},
            "problems": problems,
            "clusters": clusters,
        }
        json.dump(doc, sys.stdout, indent=2, sort_keys=True, default=str)
        print()
        return
    print(f"gpuhint status, cluster {cluster}: {LEVELS[code].upper()} (exit {code})")
    order = ["kafka", "redis", "worker", "hints", "job events", "agents"]
    for name in order + sorted(k for k in checks if k not in order):
        if name in checks:
            c = checks[name]
            print(f"  {name:<26} {c.state:<5} {c.detail}")
    if checks["redis"].state == FAIL:  # where the appliers' records live: nothing known
        print(f"  {'appliers':<26} {'?':<5} unknown: Redis, where they record, is unreachable")
    elif not any(k.startswith("applier ") for k in checks):
        print(f"  {'appliers':<26} {NONE:<5} no applier has recorded a pass for {cluster}")
    for p in problems:
        print(f"  ! {p}")
