"""``gpuhint serve``'s periodic passes: the Kueue pass started while the API server does not
answer (an outage like a later one, not the end of the process), and the queue sweep."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gpuhint.cli import build_parser, serve
from gpuhint.cli import kueue as cli_kueue
from gpuhint.kueue.hints import MemoryHints
from gpuhint.kueue.kube import KubeError
from gpuhint.kueue.memory import UnreachableAtFirst


class _Records(list[dict[str, Any]]):
    """A stand-in for redis.Redis where the pass records go (for ``gpuhint status``)."""

    def set(self, key: str, value: str, ex: int | None = None) -> None:
        self.append(json.loads(value))


def test_serve_kueue_started_with_the_api_server_down_retries_its_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gpuhint.kueue.hints as kueue_hints

    k = UnreachableAtFirst(down=2)
    monkeypatch.setattr(cli_kueue, "_backend", lambda _ks: k)
    hints = MemoryHints({})
    hints.r = records = _Records()  # type: ignore[attr-defined]
    monkeypatch.setattr(kueue_hints, "hint_reader", lambda _url, _prefix: hints)
    monkeypatch.setattr(serve, "_kueue_feed", lambda _cluster, _ks: None)
    args = build_parser().parse_args(["serve", "--kueue", "--cluster", "c"])
    stop = threading.Event()
    _, site = serve._kueue_site(args, stop)  # before: UserError "Kubernetes API: ..." (exit 2)
    (p,) = site.passes
    for _ in range(2):
        with pytest.raises(KubeError):
            p.run()
    p.run()  # the API server answers: classes made, watches started, the pass done
    p.run()
    assert k.classes and k.watches == 1
    assert [r["ok"] for r in records] == [False, False, True, True]


def test_serve_sweeps_stale_queue_members_as_the_worker_does() -> None:
    """A queue member whose hint expired is dropped every 5 minutes by the worker
    (docs/redis-keys.md); ``serve`` ran no sweep, so such ids stayed in the queues."""
    from gpuhint.cores.sink import InMemoryStore

    class Swept(InMemoryStore):
        swept = 0

        def sweep_stale(self) -> int:
            self.swept += 1
            return 0

    store = Swept()
    (p,) = serve.sweep_passes(store)
    assert p.interval_s == serve.SWEEP_INTERVAL_S and p.attempt(0.0) and store.swept == 1
    assert serve.sweep_passes(InMemoryStore()) == []  # a store without a sweep: none
