"""The appliers' pass records (gpuhint/redis/applier_status.py) as ``gpuhint status``
reads them, on a stand-in for Redis that expires keys as Redis does."""

from __future__ import annotations

from typing import Any

from gpuhint.cli.status import WARN, _redis_checks, assess
from gpuhint.redis.applier_status import read_passes, record_pass
from gpuhint.wire.keys import RedisKeys

DAY = 86400.0


class _ExpiringRedis:
    """get / set with ``ex``, on a clock of its own (``now``)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.data: dict[str, tuple[str, float | None]] = {}

    def set(self, key: str, value: str, ex: float | None = None) -> None:
        self.data[key] = (value, None if ex is None else self.now + ex)

    def get(self, key: str) -> str | None:
        value, until = self.data.get(key, ("", None))
        if key not in self.data or (until is not None and self.now >= until):
            return None
        return value


class _Client:
    """What ``gpuhint status`` reads of Redis, for a cluster with no hint."""

    def __init__(self, r: _ExpiringRedis, keys: RedisKeys) -> None:
        self.r, self.keys = r, keys

    def vcs(self, cluster: str) -> list[str]:
        return []

    def newest_change(self, types: Any, cluster: str) -> None:
        return None

    def applier_passes(self, cluster: str) -> dict[str, dict[str, Any]]:
        return read_passes(self.r, self.keys, cluster)

    def clusters(self) -> list[str]:
        return ["prod"]


def test_an_applier_stopped_for_weeks_is_still_said_to_be_stopped() -> None:
    """Its last record must outlive it: gone after a week, `gpuhint status` would say no
    applier ever ran and, with nothing to warn about, exit 0 (healthy) while the queue
    has had no gpuhint priorities for a week."""
    r, keys = _ExpiringRedis(), RedisKeys()
    record_pass(r, keys, "prod", "slurm-priorities", ok=True, interval_s=30, now=r.now)
    r.now = 30 * DAY
    checks, _ = _redis_checks(_Client(r, keys), "prod", now=r.now)
    check = checks["applier slurm-priorities"]
    assert check.state == WARN and "30.0 d ago" in check.detail and "stopped" in check.detail
    assert assess(checks, 300)[0] == 1


def test_a_kueue_pass_with_failed_patches_is_degraded() -> None:
    """The Kueue applier without the right to patch Jobs (RBAC) finishes every pass
    with every patch failed: a pass that worked, by its record, but nothing changes."""
    r, keys = _ExpiringRedis(), RedisKeys()
    result = {"relabelled": 0, "errors": 12, "refused": 0, "pending": 12}
    record_pass(r, keys, "prod", "kueue", ok=True, interval_s=5, result=result, now=r.now)
    checks, _ = _redis_checks(_Client(r, keys), "prod", now=r.now + 1)
    check = checks["applier kueue"]
    assert check.state == WARN and "12 patch(es) failed" in check.detail
    assert assess(checks, 300)[0] == 1
