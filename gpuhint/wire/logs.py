"""Rate-limited logging for chatty client libraries (aiokafka logs ~110 lines/s per dead broker).

>>> import logging
>>> f = RateLimitFilter(every_s=30.0, clock=lambda: 0.0)
>>> rec = lambda: logging.LogRecord("aiokafka", logging.ERROR, "", 0, "down %s", ("n1",), None)
>>> [f.filter(rec()) for _ in range(3)]
[True, False, False]
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitFilter(logging.Filter):
    """Passes each message template once per ``every_s``; the next pass says how many were cut."""

    def __init__(self, every_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._cut: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._cut[key] = self._cut.get(key, 0) + 1
            return False
        self._last[key] = now
        cut = self._cut.pop(key, 0)
        if cut:
            record.msg = f"{record.msg} ({cut} similar line(s) in the last {self.every_s:.0f} s)"
        return True


def rate_limit(prefixes: tuple[str, ...] = ("aiokafka", "kafka"), every_s: float = 30.0) -> None:
    """Attach one :class:`RateLimitFilter` to every existing logger under ``prefixes``."""
    f = RateLimitFilter(every_s)
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] in prefixes]
    for name in {*names, *prefixes}:
        logging.getLogger(name).addFilter(f)
