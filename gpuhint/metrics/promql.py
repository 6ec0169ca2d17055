"""The dashboard's query recipes: each prints as PromQL (for Grafana) and evaluates on a
recorded series of scrapes (for the picture in docs/metrics.md), so the two cannot drift
apart; and the dashboard's variables (cluster, VC).

>>> Rate("gpuhint_job_events_total", by=("phase",)).promql()
'sum by (phase) (rate(gpuhint_job_events_total[$__rate_interval]))'
>>> s = [Scrape(0.0, {("x_total", ()): 0.0}), Scrape(10.0, {("x_total", ()): 50.0})]
>>> Rate("x_total").evaluate(s)
{(): [(10.0, 5.0)]}
>>> Level("q", by=("vc",), filters=("cluster",)).promql()
'sum by (vc) (q{cluster=~"$cluster"})'
"""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

Labels = tuple[tuple[str, str], ...]
SeriesOut = dict[Labels, list[tuple[float, float]]]


@dataclass(frozen=True)
class Scrape:
    """One scrape: its time and every sample, keyed (name, sorted labels)."""

    t: float
    samples: dict[tuple[str, Labels], float]


def _match(labels: Labels, where: dict[str, str]) -> bool:
    d = dict(labels)
    return all(d.get(k) == v for k, v in where.items())


def _group(labels: Labels, by: Sequence[str]) -> Labels:
    d = dict(labels)
    return tuple((k, d.get(k, "")) for k in by)


def _selector(metric: str, where: dict[str, str], filters: Sequence[str] = ()) -> str:
    """``metric{k="v",...,f=~"$f"}``: exact labels, then a dashboard variable per filter."""
    parts = [f'{k}="{v}"' for k, v in sorted(where.items())]
    parts += [f'{f}=~"${f}"' for f in filters]
    return metric + ("{" + ",".join(parts) + "}" if parts else "")


@dataclass(frozen=True)
class Var:
    """A dashboard variable: the values of ``label`` on the series of ``selector``
    (several may be chosen; "All" matches every value, and series without the label)."""

    name: str
    label: str
    selector: str
    title: str


VARIABLES: tuple[Var, ...] = (
    Var(
        "cluster",
        "cluster",
        '{__name__=~"gpuhint_queue_length|gpuhint_cluster_nodes|'
        'gpuhint_newest_hint_timestamp_seconds"}',
        "cluster",
    ),
    Var("vc", "vc", 'gpuhint_queue_length{cluster=~"$cluster"}', "VC"),
)


def expand(expr: str, rate_interval: str = "5m") -> str:
    """A panel's PromQL as Prometheus itself takes it: ``$__rate_interval`` given, every
    dashboard variable at "All" (``.*``).

    >>> expand('sum (rate(x{cluster=~"$cluster"}[$__rate_interval]))')
    'sum (rate(x{cluster=~".*"}[5m]))'
    """
    out = expr.replace("$__rate_interval", rate_interval)
    for v in VARIABLES:
        out = out.replace(f"${v.name}", ".*")
    return out


def _by(by: Sequence[str]) -> str:
    return f" by ({', '.join(by)})" if by else ""


@dataclass(frozen=True)
class Rate:
    """``sum by (...) (rate(counter[w]))``: per-second increase of a counter."""

    metric: str
    by: tuple[str, ...] = ()
    where: dict[str, str] = field(default_factory=dict)
    legend: str = ""
    scale: float = 1.0
    filters: tuple[str, ...] = ()  # labels narrowed by the dashboard variables

    def promql(self) -> str:
        sel = _selector(self.metric, self.where, self.filters)
        q = f"sum{_by(self.by)} (rate({sel}[$__rate_interval]))"
        return q if self.scale == 1.0 else f"{q} * {self.scale:g}"

    def evaluate(self, scrapes: Sequence[Scrape], window_s: float = 0.0) -> SeriesOut:
        """Per-second increase over the last ``window_s`` (0: between adjacent scrapes)."""
        steps: list[tuple[float, float, dict[Labels, float]]] = []  # (t_prev, t, increases)
        for prev, cur in itertools.pairwise(scrapes):
            if cur.t <= prev.t:
                continue
            incs: dict[Labels, float] = {}
            for (name, labels), v in cur.samples.items():
                if name != self.metric or not _match(labels, self.where):
                    continue
                before = prev.samples.get((name, labels))
                if before is None:  # a new series: no increase yet (as Prometheus's rate)
                    continue
                g = _group(labels, self.by)
                incs[g] = incs.get(g, 0.0) + (v - before if v >= before else v)  # v<: a reset
            steps.append((prev.t, cur.t, incs))
        out: SeriesOut = {}
        for i, (_, t, _) in enumerate(steps):
            j = i
            while j > 0 and t - steps[j - 1][0] <= window_s:
                j -= 1
            span = t - steps[j][0]
            sums: dict[Labels, float] = {}
            for _, _, incs in steps[j : i + 1]:
                for g, inc in incs.items():
                    sums[g] = sums.get(g, 0.0) + inc
            for g, v in sums.items():
                out.setdefault(g, []).append((t, v / span * self.scale))
        return out


@dataclass(frozen=True)
class Level:
    """``agg by (...) (metric)``: a gauge, or a counter's running total."""

    metric: str
    by: tuple[str, ...] = ()
    where: dict[str, str] = field(default_factory=dict)
    agg: str = "sum"
    legend: str = ""
    filters: tuple[str, ...] = ()  # labels narrowed by the dashboard variables

    def promql(self) -> str:
        return f"{self.agg}{_by(self.by)} ({_selector(self.metric, self.where, self.filters)})"

    def evaluate(self, scrapes: Sequence[Scrape]) -> SeriesOut:
        out: SeriesOut = {}
        for sc in scrapes:
            groups: dict[Labels, list[float]] = {}
            for (name, labels), v in sc.samples.items():
                if name == self.metric and _match(labels, self.where):
                    groups.setdefault(_group(labels, self.by), []).append(v)
            for g, vs in groups.items():
                v = {"sum": sum(vs), "max": max(vs), "avg": sum(vs) / len(vs)}[self.agg]
                out.setdefault(g, []).append((sc.t, v))
        return out


@dataclass(frozen=True)
class RatioOfRates:
    """``sum(rate(num[w])) / sum(rate(den[w]))``: e.g. a summary's recent mean."""

    num: str
    den: str
    legend: str = ""

    def promql(self) -> str:
        return f"sum(rate({self.num}[$__rate_interval])) / sum(rate({self.den}[$__rate_interval]))"

    def evaluate(self, scrapes: Sequence[Scrape], window: int = 5) -> SeriesOut:
        pts: list[tuple[float, float]] = []
        for i in range(window, len(scrapes)):
            a, b = scrapes[i - window], scrapes[i]
            dn = _sum(b, self.num) - _sum(a, self.num)
            dd = _sum(b, self.den) - _sum(a, self.den)
            if dd > 0:
                pts.append((b.t, dn / dd))
        return {(): pts} if pts else {}


def _sum(sc: Scrape, metric: str) -> float:
    return sum(v for (n, _), v in sc.samples.items() if n == metric)


@dataclass(frozen=True)
class Age:
    """``time() - max by (...) (metric)``: seconds since a UNIX-time gauge's moment.

    >>> Age("t_seconds", by=("applier",)).promql()
    'time() - max by (applier) (t_seconds)'
    >>> Age("t_seconds").evaluate([Scrape(100.0, {("t_seconds", ()): 40.0})])
    {(): [(100.0, 60.0)]}
    """

    metric: str
    by: tuple[str, ...] = ()
    legend: str = ""
    filters: tuple[str, ...] = ()

    def promql(self) -> str:
        return f"time() - max{_by(self.by)} ({_selector(self.metric, {}, self.filters)})"

    def evaluate(self, scrapes: Sequence[Scrape]) -> SeriesOut:
        out: SeriesOut = {}
        for sc in scrapes:
            groups: dict[Labels, float] = {}
            for (name, labels), v in sc.samples.items():
                if name == self.metric:
                    g = _group(labels, self.by)
                    groups[g] = max(groups.get(g, v), v)
            for g, v in groups.items():
                out.setdefault(g, []).append((sc.t, sc.t - v))
        return out


Query = Rate | Level | RatioOfRates | Age


def read_series(path: Path) -> list[Scrape]:
    """Read a recorded series (JSON lines, optionally gzipped) into merged scrapes.

    Each line is ``{"t": seconds, "source": name, "samples": [[name, {labels}, value]]}``;
    lines of different sources within one round (same ``round``) are merged.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    rounds: dict[int, Scrape] = {}
    with opener(path, "rt") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            r = int(rec["round"])
            sc = rounds.setdefault(r, Scrape(float(rec["t"]), {}))
            for name, labels, v in rec["samples"]:
                sc.samples[(name, tuple(sorted(labels.items())))] = float(v)
    return [rounds[r] for r in sorted(rounds)]
