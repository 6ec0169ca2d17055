"""The Redis store: the key schema of :mod:`gpuhint.wire.keys` written in pipelines.

Writes are buffered (see :class:`gpuhint.cores.sink.BufferedStore`) and one ``flush()``
sends them as a single non-transactional pipeline. A batch sent again (its reply was
lost: a timeout, a dropped connection, then redis-py's or the sink's retry) leaves Redis
as if it was applied once: every hint write is idempotent (a hint is ``SET`` +
``ZADD``, a removal is ``DEL`` + ``ZREM``, in Lua scripts, so the change stream records
a removal only when a hint really existed, and a hint or an update only when it
changed), and each other write that is not (a counter, a change entry) carries its
sequence number: Redis applies it only if the bitmap of the batch in flight
``writer:{id}:applied`` has no bit set for it yet (``_APPLIED``). If Redis lost its
script cache, only the hint scripts, from the first refused one on, are sent again.
A hint write sent under a VC other than the one whose hint for the job lives is refused
and counted (``hint_vc_conflicts`` in the stats hash, and one warning per flush). Every
pipeline begins with ``SET epoch <random> NX``, ``GET epoch`` and reads the last
sequence number of this store that Redis holds: when the SET succeeds, or the marker is
not the one this store saw last (another worker re-created it), Redis had lost its data;
when Redis holds less than it acknowledged, it came back from an older snapshot (RDB or
AOF). Either way the worker rewrites its pending hints
(:attr:`~gpuhint.cores.sink.BufferedStore.empty_detected`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import Any

import redis
from redis.exceptions import NoScriptError

from gpuhint.cores.sink import (
    HINT_VC_CONFLICTS,
    BufferedStore,
    Count,
    MarkRebuilt,
    Op,
    PutAdvisory,
    PutHint,
    PutLoad,
    PutStarts,
    RemoveHint,
    UpdateHint,
    VcConflict,
    op_target,
)
from gpuhint.redis.client import as_text
from gpuhint.wire import keys as K
from gpuhint.wire.contract import PriorityHint
from gpuhint.wire.keys import RedisKeys

log = logging.getLogger(__name__)

_SCRIPTED = (PutHint, UpdateHint, RemoveHint)
"""The ops written by a Lua script (``EVALSHA``): idempotent, safe to send again."""


def _raise_first(replies: Iterable[Any]) -> None:
    """Raise the first error among a pipeline's replies (as ``execute()`` would)."""
    for r in replies:
        if isinstance(r, Exception):
            raise r


_WRITER_TTL_S = 30 * 86400
"""Lifetime of a writer's record ``{p}:v1:writer:{id}`` (refreshed by every flush)."""

# Writes that are not idempotent by themselves (a counter, a change entry) are applied
# at most once per write, even when their batch is sent again (a lost reply): the
# writer's record holds ``base``, the sequence number just below the batch in flight,
# and the bitmap ``writer:{id}:applied`` one bit per write of that batch, set once the
# write was applied. A pipeline is not a transaction: a write in the middle can fail
# (OOM, a key of another type) while later ones are applied, so a single "highest write
# applied" watermark would skip the failed one when the batch is sent again. A new
# batch (another base) clears the bitmap: the previous batch was acknowledged whole.
_APPLIED = f"""
local function applied(writer, bits, base, seq)
  if redis.call('HGET', writer, 'base') ~= base then
    redis.call('DEL', bits)
    redis.call('HSET', writer, 'base', base)
    redis.call('EXPIRE', writer, {_WRITER_TTL_S})
  end
  return redis.call('GETBIT', bits, tonumber(seq) - tonumber(base) - 1) == 1
end
local function mark(bits, base, seq)
  redis.call('SETBIT', bits, tonumber(seq) - tonumber(base) - 1, 1)
  redis.call('EXPIRE', bits, {_WRITER_TTL_S})
end
"""

# A job id belongs to the VC whose hint for it lives (docs/redis-keys.md): a write sent
# under another VC is refused, counted (HINCRBY stats <counter>, once per write even if
# the batch is sent again: KEYS[5] and KEYS[6] are the writer's record and bitmap,
# ARGV[9] and ARGV[10] (removal: ARGV[6], ARGV[7]) the write's sequence number and the
# batch's base) and answered with the owner's VC, which the store logs. The VC is read
# from the stored JSON (cjson); a value that is not a hint's JSON is overwritten as
# before.
_OWNER = (
    _APPLIED
    + """
local function owner(cur, vc)
  local ok, old = pcall(cjson.decode, cur)
  if ok and type(old) == 'table' and type(old.vc) == 'string' and old.vc ~= vc then
    return old.vc
  end
  return nil
end
local function refused(stats, counter, writer, bits, base, seq)
  if not applied(writer, bits, base, seq) then
    redis.call('HINCRBY', stats, counter, 1)
    mark(bits, base, seq)
  end
end
"""
)

# The write of _PUT_HINT and _UPDATE_HINT once the hint may move (``cur``: the stored
# hint, or false), announced as ``kind`` unless it is the very hint already stored.
_WRITE_HINT = """
local function write(cur, kind)
  local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[4])
  local same = cur == ARGV[2] and score and tonumber(score) == tonumber(ARGV[3])
  if not same then
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[7], '*', 'type', kind,
               'cluster', ARGV[5], 'vc', ARGV[6], 'job_id', ARGV[1], 'priority', ARGV[3])
  end
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[4])
  return same and 0 or 1
end
"""

# KEYS: hint key, queue key, changes stream, stats hash, writer, writer's bitmap; ARGV:
# job_id, hint JSON, priority, ttl, cluster, vc, maxlen, conflict counter, sequence
# number, batch base. One
# command per new hint instead of SET + ZADD + EXPIRE + XADD. The hint already stored
# (same JSON, same score: a re-emit) is rewritten for its TTL but not announced again.
# The hint key is written (or, by a removal, deleted) last, after the change entry: Lua
# does not undo a script's writes before an error, so a failed XADD (a key of another
# type) must leave the hint as it was, to be announced when the batch is sent again.
# Returns 1 (announced), 0 (rewritten) or the owner's VC (refused).
_PUT_HINT = (
    _OWNER
    + _WRITE_HINT
    + """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[2] then
  local other = owner(cur, ARGV[6])
  if other then
    refused(KEYS[4], ARGV[8], KEYS[5], KEYS[6], ARGV[10], ARGV[9])
    return other
  end
end
return write(cur, 'hint')
"""
)

# KEYS: hint key, queue key, changes stream, stats hash, writer, writer's bitmap; ARGV:
# job_id, cluster, vc, maxlen, conflict counter, sequence number, batch base. The job
# always leaves its own VC's queue; its hint goes (and a removal is announced) only when
# it exists and is that VC's.
_REMOVE_HINT = (
    _OWNER
    + """
redis.call('ZREM', KEYS[2], ARGV[1])
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local other = owner(cur, ARGV[3])
if other then
  refused(KEYS[4], ARGV[5], KEYS[5], KEYS[6], ARGV[7], ARGV[6])
  return other
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*',
           'type', 'hint_removed', 'cluster', ARGV[2], 'vc', ARGV[3], 'job_id', ARGV[1])
redis.call('DEL', KEYS[1])
return 1
"""
)

# KEYS and ARGV as _PUT_HINT. Only a hint that still exists (its job has not started)
# and is the same VC's moves. The queue's TTL is refreshed as by a put; the very hint
# already stored (a replayed update) is rewritten but not announced again.
_UPDATE_HINT = (
    _OWNER
    + _WRITE_HINT
    + """
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local other = owner(cur, ARGV[6])
if other then
  refused(KEYS[4], ARGV[8], KEYS[5], KEYS[6], ARGV[10], ARGV[9])
  return other
end
return write(cur, 'hint_updated')
"""
)

# A counter increment or a change entry (of an advice, a load or a rebuild), applied at
# most once per write (_APPLIED). Sent with EVAL, never EVALSHA, so a lost script cache
# cannot leave one behind a later one. KEYS: the writer's record, the stats hash or the
# change stream, the writer's bitmap; ARGV: the sequence number, the batch base, then
# 'incr', field, n or 'xadd', maxlen, field, value, ...
_ONCE = (
    _APPLIED
    + """
if applied(KEYS[1], KEYS[3], ARGV[2], ARGV[1]) then
  return 0
end
if ARGV[3] == 'incr' then
  redis.call('HINCRBY', KEYS[2], ARGV[4], ARGV[5])
else
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[4], '*', unpack(ARGV, 5))
end
mark(KEYS[3], ARGV[2], ARGV[1])
return 1
"""
)

# KEYS: a queue key; ARGV: the cluster's hint key prefix, the queue's VC, then members.
# Drops (in one step, so a hint written meanwhile is never missed) each member whose
# hint is gone, or is another VC's (a member left behind when its hint expired and the
# job id was hinted again under another VC). Returns how many were dropped.
_SWEEP = """
local gone = 0
for i = 3, #ARGV do
  local cur = redis.call('GET', ARGV[1] .. ARGV[i])
  local stale = not cur
  if cur then
    local ok, h = pcall(cjson.decode, cur)
    stale = ok and type(h) == 'table' and type(h.vc) == 'string' and h.vc ~= ARGV[2]
  end
  if stale then
    gone = gone + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return gone
"""
_SWEEP_CHUNK = 500


class RedisStore(BufferedStore):
    """Writes hints, advisories and load to Redis; reads them back for clients and tests."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys | None = None,
        hint_ttl_s: int = 7 * 86400,
        advisory_ttl_s: int = 3600,
        changes_maxlen: int = 100_000,
        max_buffer: int = 10_000,
    ) -> None:
        super().__init__(max_buffer)
        self.r = client
        self.k = keys or RedisKeys()
        self.hint_ttl_s = hint_ttl_s
        self.advisory_ttl_s = advisory_ttl_s
        self.changes_maxlen = changes_maxlen
        self._remove = self.r.register_script(_REMOVE_HINT)
        self._update = self.r.register_script(_UPDATE_HINT)
        self._put = self.r.register_script(_PUT_HINT)
        self._sweep = self.r.register_script(_SWEEP)
        self._scripts_loaded = False
        writer_id = uuid.uuid4().hex
        self.writer = self.k.writer(writer_id)
        """This store's record in Redis: which of its writes Redis holds (docs/redis-keys.md)."""
        self.writer_bits = self.k.writer_applied(writer_id)
        """Which writes of the batch in flight Redis applied (``_APPLIED``)."""
        self._acked = 0
        """How many writes Redis acknowledged (each write's sequence number is its rank)."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisStore:
        client = redis.Redis.from_url(url, socket_timeout=10, health_check_interval=30)
        return cls(client, **kwargs)

    def _xadd(self, pipe: Any, seq: int, fields: dict[str, str]) -> None:
        """A change entry, added once even if the batch is sent again (``_ONCE``)."""
        args = [x for kv in fields.items() for x in kv]
        pipe.eval(_ONCE, 3, *self._once_keys(self.k.changes), seq, self._acked, "xadd",
                  self.changes_maxlen, *args)  # fmt: skip

    def _once_keys(self, target: str) -> tuple[str, str, str]:
        """``_ONCE``'s keys: the writer's record, ``target``, the writer's bitmap."""
        return self.writer, target, self.writer_bits

    def _apply(self, ops: list[Op]) -> None:
        if not self._scripts_loaded:
            self._load_scripts()
        numbered = list(enumerate(ops, start=self._acked + 1))
        flushed = self._acked + len(ops)
        results, starts = self._send(numbered, flushed)
        replies = [results[i] for i in starts]  # each op's first reply
        _raise_first(r for r in results if not isinstance(r, NoScriptError))
        lost = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
        if lost:
            # Redis lost its script cache (restarted, SCRIPT FLUSH). Every other command
            # of the pipeline ran (``_ONCE`` goes by EVAL): send only the hint scripts
            # again, in order, from the first lost one on (those are idempotent)
            self._load_scripts()
            again = [i for i in range(lost[0], len(ops)) if isinstance(ops[i], _SCRIPTED)]
            redo, redo_starts = self._send([numbered[i] for i in again], flushed)
            _raise_first(redo)
            for i, at in zip(again, redo_starts, strict=True):
                replies[i] = redo[at]
        held = results[2]  # the last write of this store Redis holds
        lost_writes = self._acked > 0 and (held is None or int(held) < self._acked)
        self._saw_epoch(bool(results[0]), as_text(results[1]), lost_writes)
        self._acked += len(ops)
        conflicts: list[VcConflict] = []
        for op, res in zip(ops, replies, strict=True):
            target = op_target(op)
            if target is not None and isinstance(res, bytes | str):
                # refused: the script answered the owner's VC
                conflicts.append(VcConflict(*target, owner=as_text(res)))
        self._refused(conflicts)

    def _hint_script(self, pipe: Any, script: Any, h: PriorityHint, seq: int) -> None:
        """Queue ``_PUT_HINT`` or ``_UPDATE_HINT`` (same keys and arguments) for a hint."""
        pipe.evalsha(
            script.sha,
            6,
            self.k.hint(h.cluster, h.job_id),
            self.k.queue(h.cluster, h.vc),
            self.k.changes,
            self.k.stats,
            self.writer,
            self.writer_bits,
            h.job_id,
            h.model_dump_json(),
            repr(h.priority),
            self.hint_ttl_s,
            h.cluster,
            h.vc,
            self.changes_maxlen,
            HINT_VC_CONFLICTS,
            seq,
            self._acked,
        )

    def _load_scripts(self) -> None:
        """Load the Lua scripts once (``SCRIPT LOAD``), not one ``SCRIPT EXISTS`` per flush."""
        for script in (self._remove, self._update, self._put):
            self.r.script_load(script.script)
        self._scripts_loaded = True

    def _send(self, ops: list[tuple[int, Op]], flushed: int) -> tuple[list[Any], list[int]]:
        """One pipeline: the epoch marker and the writer's record, then every op (with its
        sequence number) in order, then ``flushed`` (the batch's last sequence number)
        into the writer's record. Returns the replies (errors as values, not raised) and
        the index of each op's first reply."""
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.k.epoch, uuid.uuid4().hex, nx=True)  # True: Redis had lost it
        pipe.get(self.k.epoch)
        pipe.hget(self.writer, "flushed")  # below the last acknowledged: writes were lost
        starts: list[int] = []
        for seq, op in ops:
            starts.append(len(pipe))
            self._queue(pipe, seq, op)
        pipe.hset(self.writer, "flushed", str(flushed))
        pipe.expire(self.writer, _WRITER_TTL_S)
        return list(pipe.execute(raise_on_error=False)), starts

    def _queue(self, pipe: Any, seq: int, op: Op) -> None:
        """Queue the commands of write number ``seq``."""
        if isinstance(op, PutHint):
            self._hint_script(pipe, self._put, op.hint, seq)
        elif isinstance(op, UpdateHint):
            self._hint_script(pipe, self._update, op.hint, seq)
        elif isinstance(op, RemoveHint):
            pipe.evalsha(
                self._remove.sha,
                6,
                self.k.hint(op.cluster, op.job_id),
                self.k.queue(op.cluster, op.vc),
                self.k.changes,
                self.k.stats,
                self.writer,
                self.writer_bits,
                op.job_id,
                op.cluster,
                op.vc,
                self.changes_maxlen,
                HINT_VC_CONFLICTS,
                seq,
                self._acked,
            )
        elif isinstance(op, PutAdvisory):
            a = op.advisory
            key = (
                self.k.cluster_advice(a.cluster)
                if a.node is None
                else self.k.node_advice(a.cluster, a.node)
            )
            # unset fields left out: a reader of an older version takes a series
            # advisory (no ``off_nodes``) as before
            pipe.set(key, a.model_dump_json(exclude_none=True), ex=self.advisory_ttl_s)
            self._xadd(
                pipe,
                seq,
                {
                    "type": K.CHANGE_ADVICE,
                    "cluster": a.cluster,
                    "node": a.node or "",
                    "action": a.action.value,
                    "count": str(a.count),
                },
            )
        elif isinstance(op, PutLoad):
            ld = op.load
            pipe.set(self.k.load(ld.cluster), ld.model_dump_json(), ex=self.advisory_ttl_s)
            self._xadd(pipe, seq, {"type": K.CHANGE_LOAD, "cluster": ld.cluster})
        elif isinstance(op, PutStarts):
            s = op.starts
            pipe.set(self.k.starts(s.cluster, s.vc), s.model_dump_json(), ex=self.hint_ttl_s)
        elif isinstance(op, Count):
            keys = self._once_keys(self.k.stats)
            pipe.eval(_ONCE, 3, *keys, seq, self._acked, "incr", op.name, op.n)
        elif isinstance(op, MarkRebuilt):
            fields = {"type": K.CHANGE_REBUILT, "hints": str(op.hints), "reason": op.reason}
            self._xadd(pipe, seq, fields)

    def sweep_stale(self) -> int:
        """Drop queue members whose hint key has expired (or is another VC's hint); return
        how many were dropped."""
        removed = 0
        queues = f"{self.k.root}:queue:"
        for raw_key in self.r.scan_iter(match=f"{queues}*", count=500):
            qkey = as_text(raw_key)
            cluster, _, vc = qkey[len(queues) :].partition(":")
            raw_members: Any = self.r.zrange(qkey, 0, -1)
            members = [as_text(m) for m in raw_members]
            for i in range(0, len(members), _SWEEP_CHUNK):
                chunk = members[i : i + _SWEEP_CHUNK]
                args = [self.k.hint(cluster, ""), vc, *chunk]
                removed += int(self._sweep(keys=[qkey], args=args))
        if removed:
            log.info("swept %d stale queue entries", removed)
        return removed

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.r.close()
