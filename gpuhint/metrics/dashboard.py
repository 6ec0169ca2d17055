"""The Grafana dashboard, defined once: its JSON and the same panels drawn from a scrape.

Each panel's queries are the recipes of :mod:`gpuhint.metrics.promql`, which print as
PromQL (for Grafana) and evaluate on a recorded series of scrapes (for the picture in
docs/metrics.md), so the two cannot drift apart.

    python -m gpuhint.metrics.dashboard json  > deploy/grafana/gpuhint-dashboard.json
    python -m gpuhint.metrics.dashboard render SERIES.jsonl.gz docs/img/dashboard.png

(the series comes from ``python -m gpuhint.lab.record_metrics``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuhint.metrics.panels import PANELS, Panel
from gpuhint.metrics.promql import (
    VARIABLES,
    Age,
    Labels,
    Level,
    Query,
    Rate,
    RatioOfRates,
    Scrape,
    SeriesOut,
    Var,
    expand,
    read_series,
)

__all__ = [
    "PANELS",
    "VARIABLES",
    "Age",
    "Level",
    "Panel",
    "Rate",
    "RatioOfRates",
    "Scrape",
    "SeriesOut",
    "Var",
    "dashboard_json",
    "expand",
    "read_series",
    "render",
]


def _variable(v: Var, ds: dict[str, str]) -> dict[str, Any]:
    """A Grafana query variable over the label's values, "All" by default."""
    query = f"label_values({v.selector}, {v.label})"
    return {
        "name": v.name,
        "label": v.title,
        "type": "query",
        "datasource": ds,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2,  # on time range change
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def dashboard_json(panels: Sequence[Panel] = PANELS) -> dict[str, Any]:
    """A Grafana dashboard (schema 39) over a ``DS_PROMETHEUS`` data source variable."""
    ds = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    out_panels = []
    for i, p in enumerate(panels):
        targets = [
            {
                "datasource": ds,
                "expr": q.promql(),
                "legendFormat": q.legend or "__auto",
                "refId": chr(ord("A") + j),
            }
            for j, q in enumerate(p.queries)
        ]
        out_panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": p.title,
                "description": p.description,
                "datasource": ds,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {
                    "defaults": {
                        "unit": p.unit,
                        "custom": {
                            "fillOpacity": 20 if p.stack else 5,
                            "stacking": {"mode": "normal" if p.stack else "none"},
                        },
                    },
                    "overrides": [],
                },
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": targets,
            }
        )
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "type": "datasource",
                "pluginId": "prometheus",
            }
        ],
        "title": "gpuhint",
        "uid": "gpuhint-overview",
        "description": "gpuhint worker, node agents and appliers (docs/metrics.md)",
        "tags": ["gpuhint", "gpu", "kafka"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "DS_PROMETHEUS",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                },
                *(_variable(v, ds) for v in VARIABLES),
            ]
        },
        "panels": out_panels,
    }


def _legend(q: Query, labels: Labels) -> str:
    text = q.legend or ""
    for k, v in labels:
        text = text.replace("{{" + k + "}}", v)
    return text or ", ".join(v for _, v in labels) or "value"


def render(
    scrapes: Sequence[Scrape],
    out: Path,
    panels: Sequence[Panel] = PANELS,
    rate_window_s: float = 20.0,
) -> None:
    """Draw every panel from the scrapes, in the dashboard's 2-column layout.

    Rates are taken over ``rate_window_s``, as Grafana's ``$__rate_interval`` would.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(15, 2.9 * rows), squeeze=False)
    fig.patch.set_facecolor("#181b1f")
    t0 = scrapes[0].t if scrapes else 0.0
    for ax, p in zip(axes.flat, panels, strict=False):
        ax.set_facecolor("#111217")
        ax.set_title(p.title, color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e9e", labelsize=7)
        ax.grid(color="#2c3235", linewidth=0.5)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        lines: list[tuple[str, list[float], list[float]]] = []
        for q in p.queries:
            series = (
                q.evaluate(scrapes, window_s=rate_window_s)
                if isinstance(q, Rate)
                else (q.evaluate(scrapes))
            )
            for labels, pts in sorted(series.items()):
                if pts:
                    lines.append(
                        (_legend(q, labels), [t - t0 for t, _ in pts], [v for _, v in pts])
                    )
        if not lines:
            ax.text(0.5, 0.5, "no data", color="#8e8e9e", ha="center", transform=ax.transAxes)
        elif p.stack and len(lines) > 1 and len({tuple(x) for _, x, _ in lines}) == 1:
            ax.stackplot(lines[0][1], *[y for _, _, y in lines], labels=[n for n, _, _ in lines])
        else:
            for name, x, y in lines:
                ax.plot(x, y, linewidth=1.2, label=name)
        if lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2, framealpha=0.3)
        ax.set_xlabel("seconds", color="#8e8e9e", fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        "gpuhint dashboard (deploy/grafana), panels drawn from a real scrape series",
        color="#ccccdc",
        fontsize=12,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpuhint.metrics.dashboard",
        description="Write the Grafana dashboard JSON, or draw its panels from a scrape series.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("json", help="print the dashboard JSON")
    r = sub.add_parser("render", help="draw the panels from a recorded series (PNG)")
    r.add_argument("series", type=Path, help="JSON lines from python -m gpuhint.lab.record_metrics")
    r.add_argument("out", type=Path, help="PNG to write")
    args = ap.parse_args(argv)
    if args.cmd == "json":
        json.dump(dashboard_json(), sys.stdout, indent=2)
        print()
        return 0
    try:
        scrapes = read_series(args.series)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{args.series}: cannot read the series: {exc}", file=sys.stderr)
        return 2
    if len(scrapes) < 2:
        print(f"{args.series}: needs at least 2 scrapes, has {len(scrapes)}", file=sys.stderr)
        return 2
    render(scrapes, args.out)
    print(f"wrote {args.out} ({len(scrapes)} scrapes over {scrapes[-1].t - scrapes[0].t:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
