"""Unpickling state saved by an older layout: module paths that moved are mapped.

VC states and CES checkpoints are pickles in changelog topics (and the local log of
``gpuhint serve``); a pickle names each class by its module. When a module moves, state
saved before the move must still load after an upgrade in place, so every state
loader goes through :func:`loads`, which maps the old paths.

>>> import pickle
>>> from gpuhint.cores.qssf import EngineStats
>>> new = pickle.dumps(EngineStats(), protocol=0)
>>> old = new.replace(b"gpuhint.cores.qssf_state", b"gpuhint.core")
>>> type(loads(old)).__module__
'gpuhint.cores.qssf_state'
"""

from __future__ import annotations

import io
import pickle
from typing import Any

MOVED: dict[str, str] = {
    "gpuhint.core": "gpuhint.cores.qssf_state",
    "gpuhint.cores.qssf": "gpuhint.cores.qssf_state",
    "gpuhint.ces_core": "gpuhint.cores.ces",
    "gpuhint.store": "gpuhint.cores.sink",
    "gpuhint.contract": "gpuhint.wire.contract",
    "gpuhint.freshness": "gpuhint.cores.freshness",
    "agents.scheduler": "gpuhint.cores.job_tracker",
    "streams.state_table": "gpuhint.cores.pipeline.state_table",
    "streams.cluster_load": "gpuhint.cores.pipeline.cluster_load",
    "streams.placement": "gpuhint.cores.pipeline.placement",
}
"""Old module -> new module, for every module of the renovation (2026-12-05) whose
classes state pickles can name. The QSSF state (``VcState``, ``PendingJob``) moved twice:
``gpuhint.core``, then ``gpuhint.cores.qssf``, now ``gpuhint.cores.qssf_state`` (the
engine itself is not pickled)."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED.get(module, module), name)


def loads(raw: bytes) -> Any:
    """``pickle.loads`` that also reads pickles naming a module's old path."""
    return _Unpickler(io.BytesIO(raw)).load()
