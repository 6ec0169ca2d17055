"""The Grafana dashboard: its JSON is current, its panels draw, its metrics exist."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhint.lab.local.metrics_docs import documented_metrics
from gpuhint.metrics.dashboard import PANELS, Level, Rate, RatioOfRates, Scrape, dashboard_json
from gpuhint.metrics.dashboard import main as dashboard_main

REPO = Path(__file__).resolve().parents[2]
JSON = REPO / "deploy" / "grafana" / "gpuhint-dashboard.json"
SERIES = REPO / "docs" / "img" / "dashboard-series.jsonl.gz"


def test_committed_json_is_what_the_panels_make() -> None:
    assert json.loads(JSON.read_text()) == dashboard_json(), (
        "regenerate: python -m gpuhint.metrics.dashboard json > " + str(JSON.relative_to(REPO))
    )
    d = dashboard_json()
    assert len(d["panels"]) == len(PANELS) and all(p["targets"] for p in d["panels"])


def test_every_panel_metric_is_documented() -> None:
    known = documented_metrics()
    for p in PANELS:
        for q in p.queries:
            names = [q.num, q.den] if isinstance(q, RatioOfRates) else [q.metric]
            for n in names:
                base = n.removesuffix("_total").removesuffix("_sum").removesuffix("_count")
                assert n in known or base in known or f"{base}_total" in known, (p.title, n)


def test_queries_evaluate_like_promql() -> None:
    s = [
        Scrape(0.0, {("c_total", (("k", "a"),)): 10.0, ("g", (("k", "a"),)): 1.0}),
        Scrape(2.0, {("c_total", (("k", "a"),)): 14.0, ("g", (("k", "a"),)): 3.0}),
        Scrape(4.0, {("c_total", (("k", "a"),)): 2.0, ("g", (("k", "b"),)): 5.0}),  # reset
    ]
    assert Rate("c_total", by=("k",)).evaluate(s) == {(("k", "a"),): [(2.0, 2.0), (4.0, 1.0)]}
    assert Level("g", agg="max").evaluate(s) == {(): [(0.0, 1.0), (2.0, 3.0), (4.0, 5.0)]}
    assert Level("g", where={"k": "b"}).promql() == 'sum (g{k="b"})'
    r = RatioOfRates("e_sum", "e_count")
    pts = [Scrape(float(t), {("e_sum", ()): 0.5 * t, ("e_count", ()): float(t)}) for t in range(7)]
    assert r.evaluate(pts) == {(): [(5.0, 0.5), (6.0, 0.5)]}


def test_render_the_committed_series(tmp_path: Path) -> None:
    out = tmp_path / "d.png"
    assert dashboard_main(["render", str(SERIES), str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 50_000
    assert dashboard_main(["render", str(tmp_path / "missing.jsonl"), str(out)]) == 2
