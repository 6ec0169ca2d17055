"""The Grafana dashboard: its JSON is current, its panels draw, its metrics exist."""

from __future__ import annotations

import json
from pathlib import Path

from gpuhint.lab.local.metrics_docs import documented_metrics
from gpuhint.metrics.dashboard import (
    PANELS,
    VARIABLES,
    Age,
    Level,
    Rate,
    RatioOfRates,
    Scrape,
    dashboard_json,
    expand,
)
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


def test_cluster_and_vc_variables_narrow_the_panels_that_have_those_labels() -> None:
    d = dashboard_json()
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["DS_PROMETHEUS", "cluster", "vc"]
    vc = d["templating"]["list"][2]
    assert vc["definition"] == 'label_values(gpuhint_queue_length{cluster=~"$cluster"}, vc)'
    assert vc["includeAll"] and vc["multi"] and vc["allValue"] == ".*"
    exprs = {p["title"]: [t["expr"] for t in p["targets"]] for p in d["panels"]}
    assert exprs["Queue length per VC"] == [
        'max by (cluster, vc) (gpuhint_queue_length{cluster=~"$cluster",vc=~"$vc"})'
    ]
    assert 'cluster=~"$cluster"' in exprs["Energy saved (kWh, estimated)"][0]
    assert 'cluster=~"$cluster"' in exprs["Newest hint age (s)"][0]
    # every $variable in a query is one the dashboard defines, and expands for Prometheus
    for qs in exprs.values():
        for e in qs:
            assert "$" not in expand(e), e
    assert expand(VARIABLES[1].selector) == 'gpuhint_queue_length{cluster=~".*"}'


def test_health_panels() -> None:
    titles = [p.title for p in PANELS]
    for t in (
        "Newest hint age (s)",
        "Worker up and lag",
        "Applier last pass age (s)",
        "Applier last pass result",
        "Agents' last report age (s)",
    ):
        assert t in titles
    ages = [q for p in PANELS for q in p.queries if isinstance(q, Age)]
    assert {q.metric for q in ages} == {
        "gpuhint_newest_hint_timestamp_seconds",
        "gpuhint_applier_last_pass_timestamp_seconds",
        "gpuhint_agent_last_tick_timestamp_seconds",
    }
    s = [Scrape(50.0, {("gpuhint_agent_last_tick_timestamp_seconds", (("node", "n1"),)): 45.0})]
    assert Age("gpuhint_agent_last_tick_timestamp_seconds", by=("node",)).evaluate(s) == {
        (("node", "n1"),): [(50.0, 5.0)]
    }
