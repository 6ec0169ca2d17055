"""A typed reader of what the worker keeps in Redis, for schedulers and appliers.

It reads the key schema of docs/redis-keys.md (:mod:`gpuhint.wire.keys`) and never writes:
the hint of a job, a VC's queue (smallest expected service first), the power advice of a
cluster and of a node, the cluster load, and the change stream (resumable from an id).
Values are parsed into the wire contract (:mod:`gpuhint.wire.contract`); a value this schema
version cannot read raises :class:`UnreadableValue`.

A runnable example on a throwaway ``redis-server`` (yours is already running), with the
keys written by hand the way the worker writes them:

>>> import redis
>>> from gpuhint.wire.contract import PriorityHint
>>> from gpuhint.lab.local.services import LocalRedis
>>> server = LocalRedis().start()
>>> r = redis.Redis.from_url(server.url)
>>> h = PriorityHint(job_id="small", cluster="prod", vc="vcA", num_gpus=2, submit_time=0,
...     predicted_duration_s=15, priority=30, model="m", model_version="1", created_at=0)
>>> _ = r.set("gpuhint:v1:hint:prod:small", h.model_dump_json())
>>> _ = r.zadd("gpuhint:v1:queue:prod:vcA", {"big": 900, "small": 30})
>>> _ = r.xadd("gpuhint:v1:changes", {"type": "hint", "cluster": "prod", "job_id": "small"})
>>> c = HintClient(r, key_prefix="gpuhint")
>>> c.queue("prod", "vcA")
[QueueEntry(job_id='small', priority=30.0), QueueEntry(job_id='big', priority=900.0)]
>>> c.vcs("prod"), c.hint("prod", "small").predicted_duration_s, c.hint("prod", "big")
(['vcA'], 15.0, None)
>>> [(ch.type, ch.fields["job_id"]) for ch in c.changes(after="0-0")]
[('hint', 'small')]
>>> list(c.changes(after=c.last_change_id()))
[]
>>> c.close(); server.stop()
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from pydantic import BaseModel, ValidationError

from gpuhint.wire.contract import ClusterLoad, PowerAdvisory, PriorityHint, StartForecasts
from gpuhint.wire.keys import RedisKeys
from gpuhint.wire.topics import SUB_VC

__all__ = [
    "CHANGE_TYPES",
    "Change",
    "HintClient",
    "QueueEntry",
    "UnreadableValue",
]

CHANGE_TYPES = ("hint", "hint_updated", "hint_removed", "advice", "load", "rebuilt")
"""Every ``type`` the change stream carries (docs/redis-keys.md lists their fields)."""

_M = TypeVar("_M", bound=BaseModel)
_GLOB_SPECIAL = str.maketrans({c: f"\\{c}" for c in "*?[]\\"})
_MGET_CHUNK = 500
_BLOCK_STEP_MS = 5000


class UnreadableValue(ValueError):
    """A key holds a value this version cannot parse (another schema version, or junk)."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"{key}: {why}")
        self.key = key


@dataclass(frozen=True)
class QueueEntry:
    """One job waiting in a VC's queue; run the smallest ``priority`` (GPU-seconds) first."""

    job_id: str
    priority: float


@dataclass(frozen=True)
class Change:
    """One change-stream entry: its stream ``id``, its ``type`` and all its fields."""

    id: str
    type: str
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self) -> str | None:
        """The cluster the change is about (``None`` for a `rebuilt` of every cluster)."""
        return self.fields.get("cluster")


def change_time(change_id: str) -> float:
    """The UNIX time (s) of a change-stream id (Redis stream ids start with ms).

    >>> change_time("1700000000123-4")
    1700000000.123
    """
    return int(change_id.split("-", 1)[0]) / 1000.0


def spread_parts(vcs: list[str], vc: str) -> list[str]:
    """``vc`` and its spread sub-VCs ``<vc>~k`` among ``vcs``."""
    return [v for v in vcs if v == vc or v.startswith(vc + SUB_VC)]


def as_text(raw: Any) -> str:
    """A Redis reply as text (``bytes`` from a plain client, ``str`` from a decoding one)."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class HintClient:
    """Reads hints, queues, advisories, load and changes from the worker's Redis.

    ``client`` is any ``redis.Redis`` (``decode_responses`` either way); ``key_prefix``
    is the worker's ``GPUHINT_KEY_PREFIX``. Redis errors (``redis.RedisError``)
    propagate: the caller decides whether to retry.
    """

    def __init__(self, client: redis.Redis, key_prefix: str = "gpuhint") -> None:
        self.r = client
        self.keys = RedisKeys(key_prefix)

    @classmethod
    def from_url(
        cls, url: str, key_prefix: str = "gpuhint", socket_timeout: float = 10.0
    ) -> HintClient:
        """A client on ``redis://``, ``rediss://`` or ``unix://`` ``url``.

        Raises ``ValueError`` for a malformed URL (nothing is contacted yet).
        """
        r = redis.Redis.from_url(url, socket_timeout=socket_timeout, health_check_interval=30)
        return cls(r, key_prefix=key_prefix)

    def close(self) -> None:
        self.r.close()

    def __enter__(self) -> HintClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- values ------------------------------------------------------------------------
    def _parse(self, key: str, raw: Any, model: type[_M]) -> _M | None:
        if raw is None:
            return None
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            raise UnreadableValue(
                key, f"not a {model.__name__} of this schema ({exc.error_count()} error(s))"
            ) from None

    def _get(self, key: str, model: type[_M]) -> _M | None:
        return self._parse(key, self.r.get(key), model)

    def hint(self, cluster: str, job_id: str) -> PriorityHint | None:
        """The job's current hint, or ``None`` (no opinion: never hinted, started or expired)."""
        return self._get(self.keys.hint(cluster, job_id), PriorityHint)

    def hints(
        self, cluster: str, job_ids: list[str]
    ) -> list[PriorityHint | UnreadableValue | None]:
        """The hints of ``job_ids``, in order, read with ``MGET`` (500 keys a round trip):
        each a hint, ``None`` (no hint) or the :class:`UnreadableValue` its value gives."""
        out: list[PriorityHint | UnreadableValue | None] = []
        for i in range(0, len(job_ids), _MGET_CHUNK):
            chunk = [self.keys.hint(cluster, j) for j in job_ids[i : i + _MGET_CHUNK]]
            raws: Any = self.r.mget(chunk)
            for key, raw in zip(chunk, raws, strict=True):
                try:
                    out.append(self._parse(key, raw, PriorityHint))
                except UnreadableValue as exc:
                    out.append(exc)
        return out

    def cluster_advice(self, cluster: str) -> PowerAdvisory | None:
        """The cluster's latest power advisory (one per CES slot), or ``None``."""
        return self._get(self.keys.cluster_advice(cluster), PowerAdvisory)

    def node_advice(self, cluster: str, node: str) -> PowerAdvisory | None:
        """The advisory naming this node in a power-down or wake, or ``None``."""
        return self._get(self.keys.node_advice(cluster, node), PowerAdvisory)

    def load(self, cluster: str) -> ClusterLoad | None:
        """The cluster's latest load (nodes in use, powered on, idle ones), or ``None``."""
        return self._get(self.keys.load(cluster), ClusterLoad)

    def starts(self, cluster: str, vc: str) -> StartForecasts | None:
        """The VC's latest expected starts (its first waiting jobs, rank order), or None."""
        return self._get(self.keys.starts(cluster, vc), StartForecasts)

    def job_starts(self, cluster: str) -> dict[str, tuple[float, float, float, float]]:
        """job id -> (expected start, band low, band high, forecast time), UNIX seconds,
        from the latest forecast of every VC of ``cluster`` (one another schema version
        wrote is left out). The appliers show it to the scheduler's users."""
        out: dict[str, tuple[float, float, float, float]] = {}
        for vc in self.vcs(cluster):
            try:
                f = self.starts(cluster, vc)
            except UnreadableValue:
                continue
            if f is None:
                continue
            for j in f.jobs:
                out[j.job_id] = (j.expected, j.low, j.high, f.time)
        return out

    def stats(self) -> dict[str, int]:
        """The worker's counters (``dead_letter``: messages sent to the dead-letter topic);
        a field that is not an integer (another version's) is left out."""
        raw: Any = self.r.hgetall(self.keys.stats)
        out: dict[str, int] = {}
        for k, v in raw.items():
            try:
                out[as_text(k)] = int(v)
            except ValueError:
                continue
        return out

    # -- queues ------------------------------------------------------------------------
    def queue(self, cluster: str, vc: str, limit: int | None = None) -> list[QueueEntry]:
        """The VC's waiting jobs, smallest priority first (ties by job id); at most ``limit``."""
        if limit is not None and limit <= 0:
            return []
        end = -1 if limit is None else limit - 1
        rows: Any = self.r.zrange(self.keys.queue(cluster, vc), 0, end, withscores=True)
        return [QueueEntry(as_text(m), float(s)) for m, s in rows]

    def vcs(self, cluster: str) -> list[str]:
        """The VCs of ``cluster`` that have a (non-empty) queue, sorted."""
        prefix = self.keys.queue(cluster, "")
        match = prefix.translate(_GLOB_SPECIAL) + "*"
        found = {as_text(k)[len(prefix) :] for k in self.r.scan_iter(match=match, count=500)}
        return sorted(vc for vc in found if vc and ":" not in vc)

    def clusters(self) -> list[str]:
        """The clusters with a queue, a load summary or advice in Redis now, sorted."""
        found: set[str] = set()
        root = self.keys.root + ":"
        for kind in ("queue", "load", "advice"):
            match = f"{root}{kind}:".translate(_GLOB_SPECIAL) + "*"
            for key in self.r.scan_iter(match=match, count=1000):
                rest = as_text(key)[len(root) + len(kind) + 1 :]
                found.add(rest.split(":", 1)[0])
        return sorted(c for c in found if c)

    def applier_passes(self, cluster: str) -> dict[str, dict[str, Any]]:
        """Each applier's last pass for ``cluster`` (gpuhint/redis/applier_status.py)."""
        from gpuhint.redis.applier_status import read_passes

        return read_passes(self.r, self.keys, cluster)

    def newest_change(
        self, types: tuple[str, ...] = (), cluster: str | None = None, scan: int = 5000
    ) -> Change | None:
        """The newest change of one of ``types`` (any if empty) about ``cluster`` (any if
        None), among the newest ``scan`` entries; its id's first part is its time in ms
        (:func:`change_time`)."""
        last = "+"
        seen = 0
        while seen < scan:
            rows: Any = self.r.xrevrange(self.keys.changes, max=last, count=500)
            if last != "+":
                rows = rows[1:]  # the bound itself was seen
            if not rows:
                return None
            for raw_id, raw_fields in rows:
                seen += 1
                fields = {as_text(k): as_text(v) for k, v in raw_fields.items()}
                ch = Change(as_text(raw_id), fields.get("type", ""), fields)
                if (not types or ch.type in types) and cluster in (None, ch.cluster):
                    return ch
            last = as_text(rows[-1][0])
        return None

    def merged_queue(
        self, cluster: str, vc: str, limit: int | None = None, *, vcs: list[str] | None = None
    ) -> list[QueueEntry]:
        """One queue over ``vc`` and its spread sub-VCs ``<vc>~k`` (``gpuhint replay
        --spread-vcs``), smallest priority first (ties by job id); at most ``limit``.
        ``vcs``: the cluster's VCs if the caller has already listed them.

        Priorities are expected GPU-seconds, comparable across the sub-VCs' models, so
        the merge is the queue a scheduler with one real queue ranks.
        """
        if limit is not None and limit <= 0:
            return []
        parts = spread_parts(self.vcs(cluster) if vcs is None else vcs, vc)
        rows = [e for v in parts for e in self.queue(cluster, v, limit)]
        rows.sort(key=lambda e: (e.priority, e.job_id))
        return rows if limit is None else rows[:limit]

    def pending_hints(
        self, cluster: str, vc: str | None = None, *, unreadable: list[str] | None = None
    ) -> list[PriorityHint]:
        """The hints of every queued job (of ``vc``, or of all VCs), each VC in queue order.

        A queue member whose hint key has already expired, or whose hint is another
        VC's (a member left behind when the job's hint expired), is left out. A hint
        this version cannot read raises :class:`UnreadableValue`, unless ``unreadable``
        is given: then its key is appended there and the hint left out (the appliers
        treat that job as unhinted rather than stop).
        """
        out: list[PriorityHint] = []
        for v in [vc] if vc is not None else self.vcs(cluster):
            ids = [e.job_id for e in self.queue(cluster, v)]
            for job_id, h in zip(ids, self.hints(cluster, ids), strict=True):
                if isinstance(h, UnreadableValue):
                    if unreadable is None:
                        raise h
                    unreadable.append(self.keys.hint(cluster, job_id))
                elif h is not None and h.vc == v:  # else a member left behind
                    out.append(h)
        return out

    # -- change stream -----------------------------------------------------------------
    def changes(
        self, after: str = "0-0", block_ms: int | None = None, count: int = 1000
    ) -> Iterator[Change]:
        """The change-stream entries after id ``after``, oldest first.

        ``block_ms=None``: yield what is there now and stop. ``block_ms=N``: when caught
        up, wait up to N ms for more; stop after a wait that brought nothing.
        ``block_ms=0``: follow forever. Resume later from the last ``Change.id`` seen;
        ``after="$"`` starts at the newest change (as :meth:`last_change_id`).
        The stream is trimmed (``changes_maxlen``): if ``after`` is older than
        :meth:`first_change_id`, entries were lost, so re-read the queues.
        """
        if count < 1:
            raise ValueError("count must be >= 1")
        # "$" (what comes next) is taken once: read again after a wait, it would skip
        # what came in between
        last = self.last_change_id() if after == "$" else after
        stream = self.keys.changes
        longest = self._block_step_ms()
        while True:
            resp: Any = self.r.xread({stream: last}, count=count)
            waited = 0
            while not resp and block_ms is not None and (block_ms == 0 or waited < block_ms):
                # short waits, so a blocked read never outlasts the socket timeout
                step = longest if block_ms == 0 else min(longest, block_ms - waited)
                resp = self.r.xread({stream: last}, count=count, block=step)
                waited += step
            if not resp:
                return
            entries = resp[0][1]
            for raw_id, raw_fields in entries:
                fields = {as_text(k): as_text(v) for k, v in raw_fields.items()}
                last = as_text(raw_id)
                yield Change(last, fields.get("type", ""), fields)

    def _block_step_ms(self) -> int:
        """The longest blocked read: 5 s, or half the client's socket timeout if shorter
        (a read that outlasts it raises ``TimeoutError`` instead of returning nothing)."""
        timeout = self.r.connection_pool.connection_kwargs.get("socket_timeout")
        if not timeout:
            return _BLOCK_STEP_MS
        return max(1, min(_BLOCK_STEP_MS, int(float(timeout) * 500)))

    def last_change_id(self) -> str:
        """The id of the newest change (``"0-0"`` for an empty stream): start following here."""
        rows: Any = self.r.xrevrange(self.keys.changes, count=1)
        return as_text(rows[0][0]) if rows else "0-0"

    def first_change_id(self) -> str:
        """The id of the oldest change still kept (``"0-0"`` for an empty stream)."""
        rows: Any = self.r.xrange(self.keys.changes, count=1)
        return as_text(rows[0][0]) if rows else "0-0"
