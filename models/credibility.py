"""Bühlmann credibility sums per ``cluster|vc|level`` (for
:meth:`models.features.HistoryFeatures.expected_duration`), kept online.

Each entry of ``cred`` is ``[N jobs, S sum, Q sum of squares, K keys, A = sum over keys
of sum^2/n, B = sum over keys of n^2, cached k or -1]`` (durations in seconds), a plain
list so that VC state pickles as before.
"""

from __future__ import annotations

import math

from models.keystats import KeyStats


def credibility_k(cred: dict[str, list[float]], vc_level: str) -> float:
    """Bühlmann's ``k`` (within-key variance / between-key variance of means) for a
    ``cluster|vc|level``; ``inf`` (no credibility) until it can be estimated."""
    a = cred.get(vc_level)
    if a is None:
        return math.inf
    if a[6] >= 0.0:  # cached since the last update
        return a[6]
    n, s, q, k, sa, b, _ = a
    out = math.inf
    if k >= 2 and n - k >= 1:
        epv = max(0.0, (q - sa) / (n - k))
        vhm = (sa - s * s / n - (k - 1) * epv) / (n - b / n)
        if vhm > 0:
            out = epv / vhm
    a[6] = out
    return out


def cred_add(cred: dict[str, list[float]], agg: str, s: KeyStats, sign: float) -> None:
    """Add (``sign`` 1) or remove (-1) a whole key's sums."""
    a = cred.get(agg)
    if a is None:
        a = cred[agg] = [0.0] * 6 + [-1.0]
    n = s.count
    a[0] += sign * n
    a[1] += sign * s.sum_dur
    a[2] += sign * s.sum_sq
    a[3] += sign
    a[4] += sign * s.sum_dur * s.sum_dur / n
    a[5] += sign * n * n
    a[6] = -1.0


def cred_job(cred: dict[str, list[float]], agg: str, s: KeyStats, d: float) -> None:
    """Account one more job of ``d`` seconds in key ``s`` (already added to ``s``)."""
    a = cred.get(agg)
    if a is None:
        a = cred[agg] = [0.0] * 6 + [-1.0]
    n = s.count
    old = s.sum_dur - d
    a[0] += 1.0
    a[1] += d
    a[2] += d * d
    if n == 1:
        a[3] += 1.0
        a[4] += d * d
    else:
        a[4] += s.sum_dur * s.sum_dur / n - old * old / (n - 1)
    a[5] += 2 * n - 1
    a[6] = -1.0
