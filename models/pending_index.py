"""Waiting jobs indexed by the history keys their prediction depends on (pure, picklable).

When a job finishes, the model learns from it and the waiting jobs that share one of its
keys (its burst, name template, user+GPUs: ``DurationModel.related_keys``) are the ones
whose expected duration moved. The index finds them in O(matches), most specific key
first, oldest first, at most ``cap`` per finished job: the work per event is bounded.

>>> idx = PendingIndex()
>>> idx.add("a", ("burst1", "user1")); idx.add("b", ("burst2", "user1"))
>>> idx.related(("burst1", "user1"), cap=10)
['a', 'b']
>>> idx.related(("burst1", "user1"), cap=1)
['a']
>>> idx.remove("a"); idx.related(("burst1", "user1"), cap=10)
['b']

Time also says something: siblings that have been running long are evidence that the
waiting ones are long too, and that evidence grows without any event of theirs.
:meth:`rotate` walks the waiting jobs' most specific keys round-robin, so that each
event can refresh a bounded few of them and every waiting burst is revisited in turn.

>>> idx.add("c", ("burst3",)); idx.rotate(1), idx.rotate(1), idx.rotate(1)
(['burst2'], ['burst3'], ['burst2'])
"""

from __future__ import annotations

from collections.abc import Sequence


class PendingIndex:
    """``key -> waiting job ids`` (insertion ordered) and ``job id -> its keys``."""

    __slots__ = ("by_key", "cycle", "keys_of")

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, None]] = {}
        self.keys_of: dict[str, tuple[str, ...]] = {}
        self.cycle: dict[str, None] = {}  # most specific keys with waiting jobs, rotating

    def __len__(self) -> int:
        return len(self.keys_of)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.keys_of

    def __getstate__(
        self,
    ) -> tuple[dict[str, dict[str, None]], dict[str, tuple[str, ...]], dict[str, None]]:
        return self.by_key, self.keys_of, self.cycle

    def __setstate__(
        self,
        state: tuple[dict[str, dict[str, None]], dict[str, tuple[str, ...]], dict[str, None]],
    ) -> None:
        self.by_key, self.keys_of, self.cycle = state

    def add(self, job_id: str, keys: Sequence[str]) -> None:
        """Index a waiting job (again: its keys are replaced)."""
        if job_id in self.keys_of:
            self.remove(job_id)
        ks = tuple(keys)
        self.keys_of[job_id] = ks
        for k in ks:
            self.by_key.setdefault(k, {})[job_id] = None
        if ks:
            self.cycle.setdefault(ks[0], None)

    def remove(self, job_id: str) -> None:
        """Forget a job (started, finished or cancelled); unknown ids are ignored."""
        ks = self.keys_of.pop(job_id, None)
        if ks is None:
            return
        for k in ks:
            ids = self.by_key.get(k)
            if ids is not None:
                ids.pop(job_id, None)
                if not ids:
                    del self.by_key[k]
                    self.cycle.pop(k, None)

    def related(self, keys: Sequence[str], cap: int) -> list[str]:
        """Waiting jobs sharing one of ``keys`` (in that order), oldest first, at most ``cap``."""
        out: dict[str, None] = {}
        for k in keys:
            ids = self.by_key.get(k)
            if not ids:
                continue
            for j in ids:
                if len(out) >= cap:
                    return list(out)
                out[j] = None
        return list(out)

    def rotate(self, n: int) -> list[str]:
        """The next ``n`` most specific keys with waiting jobs, round-robin."""
        out: list[str] = []
        cyc = self.cycle
        for _ in range(min(n, len(cyc))):
            k = next(iter(cyc))
            del cyc[k]
            cyc[k] = None
            out.append(k)
        return out

    def waiting(self, key: str, cap: int) -> list[str]:
        """Up to ``cap`` waiting jobs of one key, oldest first."""
        ids = self.by_key.get(key)
        if not ids:
            return []
        out: list[str] = []
        for j in ids:
            if len(out) >= cap:
                break
            out.append(j)
        return out
