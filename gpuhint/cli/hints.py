"""``gpuhint hints``: what a scheduler would read from Redis right now."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpuhint.cli.common import (
    UserError,
    add_config_args,
    human_duration,
    human_gpu_time,
    settings_from,
)

DESCRIPTION = """\
Reads the hints and advisories the worker keeps in Redis (docs/redis-keys.md) and shows
them the way a scheduler uses them: each VC's queue, smallest expected service first,
with the expected service (GPUs x duration, in GPU-hours), the predicted duration and
its 80% band and why the job ranks there; the cluster's current load and power advice;
and how old each is. A cluster with no data while others have some is an error that
lists the known clusters (a typo in --cluster). A VC spread over sub-VCs (`gpuhint
replay --spread-vcs`) is shown as one queue. A queued job whose hint expired (left
for the worker's 5-minute sweep) is not shown. Exit 0 with data, 1 when Redis holds no
gpuhint data yet (also with --json), 2 on an error (Redis unreachable, a bad flag).

examples:
  gpuhint hints --cluster prod                 # every VC of cluster prod
  gpuhint hints --cluster prod --vc vcA --top 20
  gpuhint hints --cluster prod --json | jq '.queues.vcA[0]'
  gpuhint hints --cluster prod --follow        # then each change as it comes (Ctrl-C stops)
  gpuhint hints --cluster prod --follow --after 0-0 --json   # from the oldest kept, JSON lines
"""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    p = sub.add_parser(
        "hints",
        help="show the priority queues and power advice in Redis",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cluster", help="cluster (else GPUHINT_CLUSTER)")
    p.add_argument("--vc", help="only this VC")
    p.add_argument("--top", type=int, default=10, help="jobs shown per VC (default 10)")
    p.add_argument("--redis-url", metavar="URL", help="Redis URL (else GPUHINT_REDIS_URL)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--follow",
        action="store_true",
        help="print this cluster's changes as they come instead (docs/redis-keys.md)",
    )
    p.add_argument(
        "--after",
        metavar="ID",
        help="--follow from this change id (0-0: from the oldest kept; default: from now)",
    )
    p.add_argument("--count", type=int, metavar="N", help="--follow: stop after N changes")
    add_config_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import redis

    from gpuhint.redis.client import HintClient, UnreadableValue, change_time

    if args.top < 0:
        raise UserError("--top must be >= 0")
    if (args.after or args.count is not None) and not args.follow:
        raise UserError("--after and --count go with --follow")
    if args.count is not None and args.count < 1:
        raise UserError("--count must be >= 1")
    settings = settings_from(args, cluster=args.cluster, redis_url=args.redis_url)
    cluster = settings.cluster
    try:
        client = HintClient.from_url(
            settings.redis_url.get_secret_value(), key_prefix=settings.key_prefix
        )
    except ValueError as exc:
        raise UserError(f"bad Redis URL: {exc}") from None
    if args.follow:
        return _follow(client, cluster, args)
    try:
        queues, lengths = _queues(client, cluster, args)
        advice = client.cluster_advice(cluster)
        load = client.load(cluster)
        dead = client.stats().get("dead_letter", 0)
        newest = client.newest_change(("hint", "hint_updated"), cluster)
        known = [] if any(lengths.values()) or load or advice else client.clusters()
    except redis.RedisError as exc:
        raise UserError(f"cannot read Redis ({type(exc).__name__}: {exc})") from None
    except UnreadableValue as exc:
        raise UserError(f"unreadable value in Redis: {exc}") from None
    finally:
        client.close()

    if known and cluster not in known:
        raise UserError(
            f"no hints, load or advice for cluster {cluster!r} in Redis; "
            f"known clusters: {', '.join(known)} (--cluster / GPUHINT_CLUSTER)"
        )
    now = time.time()
    ages = {
        "newest_hint_age_s": None if newest is None else round(now - change_time(newest.id), 1),
        "load_age_s": None if load is None else round(now - load.time, 1),
        "advice_age_s": None if advice is None else round(now - advice.time, 1),
    }
    if args.json:
        out = {
            "cluster": cluster,
            "queues": queues,
            "queue_lengths": lengths,
            "advice": advice.model_dump(mode="json") if advice else None,
            "load": load.model_dump(mode="json") if load else None,
            "dead_letter": dead,
            **ages,
        }
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        _print_text(cluster, queues, lengths, load, advice, dead, ages)
    if not any(lengths.values()) and not load and not advice and not known:
        print(
            "no gpuhint data in Redis under this key prefix yet: see `gpuhint status`",
            file=sys.stderr if args.json else sys.stdout,
        )
        return 1
    return 0


def _queues(
    client: Any, cluster: str, args: argparse.Namespace
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Each VC's first ``--top`` rows (with their hints) and each queue's length. A VC
    spread over sub-VCs ``vc~k`` (``gpuhint replay --spread-vcs``) is shown as the one
    queue a scheduler runs (:meth:`HintClient.merged_queue`); only the rows shown are
    read, so a queue of 100,000 jobs costs what one of ``--top`` does."""
    from gpuhint.redis.client import UnreadableValue, spread_parts
    from gpuhint.wire.topics import base_vc

    found = client.vcs(cluster)
    vcs = [args.vc] if args.vc else sorted({base_vc(v) for v in found})
    queues: dict[str, list[dict[str, Any]]] = {}
    lengths: dict[str, int] = {}
    for vc in vcs:
        parts = spread_parts(found, vc) or [vc]
        lengths[vc] = sum(int(client.r.zcard(client.keys.queue(cluster, v))) for v in parts)
        starts = {j: s for v in parts for j, s in _starts(client, cluster, v).items()}
        rows = []
        for rank, (entry, h) in enumerate(_live(client, cluster, vc, parts, found, args.top), 1):
            row: dict[str, Any] = {"rank": rank, "job_id": entry.job_id, "priority": entry.priority}
            if isinstance(h, UnreadableValue):  # written by another schema version
                row["error"] = f"unreadable hint: {h}"
            else:
                row.update(h.model_dump(mode="json", exclude={"schema_version", "kind"}))
            row.update(starts.get(entry.job_id, {}))
            rows.append(row)
        queues[vc] = rows
    return queues, lengths


_SCAN_MAX = 10_000
"""The most members of one queue read to find its first ``--top`` live ones."""


def _live(
    client: Any, cluster: str, vc: str, parts: list[str], found: list[str], top: int
) -> list[tuple[Any, Any]]:
    """The first ``top`` (queue entry, hint) of the VC's (merged) queue whose hint lives
    and is one of ``parts``' (or is unreadable). A member whose hint expired, or whose
    id is now another VC's, stays until the worker's sweep (5 min): it is skipped, not
    shown with no hint or with the other VC's. Reads ``top`` members, then twice as
    many while too few live ones came, up to :data:`_SCAN_MAX`."""
    from gpuhint.wire.contract import PriorityHint

    out: list[tuple[Any, Any]] = []
    seen: set[str] = set()
    limit = top
    while top > 0:
        q = client.merged_queue(cluster, vc, limit, vcs=found)
        new = [e for e in q if e.job_id not in seen]
        seen.update(e.job_id for e in new)
        for entry, h in zip(new, client.hints(cluster, [e.job_id for e in new]), strict=True):
            if h is None or (isinstance(h, PriorityHint) and h.vc not in parts):
                continue  # left behind
            out.append((entry, h))
            if len(out) == top:
                return out
        if len(q) < limit or limit >= _SCAN_MAX:
            break
        limit = min(2 * limit, _SCAN_MAX)
    return out


def _starts(client: Any, cluster: str, vc: str) -> dict[str, dict[str, float]]:
    """job -> its expected start and 80% band (UNIX s) from the VC's latest forecast, and
    when that forecast was made (``expected_start_asof``)."""
    from gpuhint.redis.client import UnreadableValue

    try:
        f = client.starts(cluster, vc)
    except UnreadableValue:
        return {}
    if f is None:
        return {}
    return {
        j.job_id: {
            "expected_start": j.expected,
            "expected_start_low": j.low,
            "expected_start_high": j.high,
            "expected_start_asof": f.time,
        }
        for j in f.jobs
    }


def _clock(t: float) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(t))


def _start_text(r: dict[str, Any]) -> str:
    """``12-05 10:40 (09:30-13:10)``: the expected start and its band, UTC; a band that
    reaches another day gives both dates: ``12-05 23:00 (12-05 22:00 - 12-06 01:30)``."""
    if "expected_start" not in r:
        return "-"
    at, lo, hi = (_clock(r[k]) for k in ("expected_start", "expected_start_low",
                                          "expected_start_high"))  # fmt: skip
    if lo[:5] == at[:5] == hi[:5]:
        return f"{at} ({lo[-5:]}-{hi[-5:]})"
    return f"{at} ({lo} - {hi})"


def _service_text(r: dict[str, Any]) -> str:
    """The expected service, GPUs x the expected duration, in GPU time. Not the priority
    where the core overrode the rank (first reason ``fifo_guard:fallback``: the submit
    time; ``wait_bound:overdue``: ~0): there it is "-" unless the hint has its
    ``expected_duration_s``."""
    from models.hint_estimate import OVERRIDE_TAGS

    expected, gpus = r.get("expected_duration_s"), r.get("num_gpus")
    if expected is not None and gpus is not None:
        return human_gpu_time(max(gpus, 1) * expected)
    reasons = r.get("reasons") or [{}]
    first = str(reasons[0].get("feature", ""))
    if first.startswith(OVERRIDE_TAGS) and not first.startswith("updated:"):
        return "-"
    return human_gpu_time(r["priority"])


def _width(text: str) -> int:
    """Terminal columns ``text`` takes: wide East Asian characters take two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal columns."""
    return text + " " * max(width - _width(text), 0)


def _age(seconds: float | None) -> str:
    return "never" if seconds is None else f"{human_duration(seconds)} ago"


def _print_text(
    cluster: str,
    queues: dict[str, list[dict[str, Any]]],
    lengths: dict[str, int],
    load: Any,
    advice: Any,
    dead: int,
    ages: dict[str, float | None],
) -> None:
    print(f"cluster {cluster}: newest hint {_age(ages['newest_hint_age_s'])}")
    if not queues:
        print(f"cluster {cluster}: no queued jobs with hints")
    for vc, rows in queues.items():
        asof = min(
            (r["expected_start_asof"] for r in rows if "expected_start_asof" in r), default=None
        )
        print(
            f"{cluster}/{vc}: {lengths[vc]:,} pending, smallest expected service first"
            + ("" if asof is None else f"; expected starts as of {_age(time.time() - asof)}")
        )
        width = max([36, *(_width(str(r["job_id"])) for r in rows)])
        starts_w = max([26, *(len(_start_text(r)) for r in rows)])
        if rows:
            print(
                f"  {'rank':>4} {_pad('job', width)} {'GPUs':>5}  {'expected service':>16}  "
                f"{'duration (80% band)':<26} {'expected start, UTC (80%)':<{starts_w}} why"
            )
        for r in rows:
            dur, lo, hi = (
                r.get(k) for k in ("predicted_duration_s", "duration_p10_s", "duration_p90_s")
            )
            when = (
                f"~{human_duration(dur)} ({human_duration(lo)}-{human_duration(hi)})"
                if dur is not None and lo is not None and hi is not None
                else ""
            )
            why = ", ".join(x["feature"] for x in r.get("reasons", [])[:2])
            gpus = r.get("num_gpus", "?")
            print(
                f"  {r['rank']:>3}. {_pad(str(r['job_id']), width)} {gpus:>5}  "
                f"{_service_text(r):>16}  {when:<26} {_start_text(r):<{starts_w}} "
                + (f"[{why}]" if why else "")
                + r.get("error", "")
            )
    if load is not None:
        print(
            f"load: {load.used_nodes:,} of {load.total_nodes:,} nodes in use, "
            f"{load.active_nodes:,} powered on (as of {_age(ages['load_age_s'])})"
        )
    if advice is not None:
        names = f" ({', '.join(advice.nodes)})" if advice.nodes else ""
        print(
            f"power advice: {advice.action.value} {advice.count:,}{names}: {advice.reason} "
            f"(as of {_age(ages['advice_age_s'])})"
        )
    if dead:
        print(f"dead-lettered messages so far: {dead:,}")


def _id_key(change_id: str) -> tuple[int, int]:
    """A stream id as a number pair, to compare (``5`` is ``5-0``)."""
    ms, _, seq = change_id.partition("-")
    return int(ms), int(seq or 0)


def _follow(client: Any, cluster: str, args: argparse.Namespace) -> int:
    """Print the changes of ``cluster`` (and cluster-less ones, e.g. ``rebuilt``) as they come."""
    import re

    import redis

    from gpuhint.wire.topics import base_vc

    if args.after is not None and not re.fullmatch(r"\d+(-\d+)?", args.after):
        raise UserError(f"--after {args.after!r} is not a stream id like 1700000000000-0")
    shown = 0
    try:
        after = args.after if args.after is not None else client.last_change_id()
        first = client.first_change_id()
        if args.after is not None and (0, 0) < _id_key(after) < _id_key(first):
            print(
                f"changes before {first} were trimmed from the stream: some after {after} "
                "may be lost; re-read the queues (`gpuhint hints`)",
                file=sys.stderr,
            )
        for ch in client.changes(after=after, block_ms=0):
            if ch.cluster not in (None, "", cluster):
                continue
            vc = ch.fields.get("vc")
            if args.vc and vc is not None and args.vc not in (vc, base_vc(vc)):
                continue  # another VC's (a spread VC's sub-VCs `vc~k` are its own)
            if args.json:
                print(json.dumps({"id": ch.id, **ch.fields}, sort_keys=True), flush=True)
            else:
                rest = " ".join(f"{k}={v}" for k, v in ch.fields.items() if k != "type")
                print(f"{ch.id} {ch.type:<13} {rest}", flush=True)
            shown += 1
            if args.count is not None and shown >= args.count:
                break
    except KeyboardInterrupt:
        pass
    except redis.RedisError as exc:
        raise UserError(f"cannot read Redis ({type(exc).__name__}: {exc})") from None
    finally:
        client.close()
    return 0
