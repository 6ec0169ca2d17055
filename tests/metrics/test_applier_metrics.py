"""The appliers' metrics helper, served and scraped over real HTTP."""

from __future__ import annotations

from gpuhint.metrics.applier import ApplierMetrics
from gpuhint.testing.scrape import get, samples, value


def test_served_counters_and_health() -> None:
    m = ApplierMetrics("kueue", stale_after_s=60)
    srv = m.serve("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{srv.port}"
        assert get(f"{base}/healthz") == (503, "no pass finished yet\n")
        m.action("set_priority_class", 4)
        m.refusal("admitted", 2)
        m.refusal("rate_limited")
        m.error("api")
        m.pass_done(seconds=1.5, pending=10, changed=4)
        status, body = get(f"{base}/healthz")
        assert status == 200 and body.startswith("last pass")
        got = samples(get(f"{base}/metrics")[1])
        k = {"applier": "kueue"}
        assert value(got, "gpuhint_applier_actions_total", action="set_priority_class", **k) == 4
        assert value(got, "gpuhint_applier_refusals_total", reason="admitted", **k) == 2
        assert value(got, "gpuhint_applier_refusals_total", reason="rate_limited", **k) == 1
        assert value(got, "gpuhint_applier_errors_total", kind="api", **k) == 1
        assert value(got, "gpuhint_applier_pass_seconds_count", **k) == 1
        assert value(got, "gpuhint_applier_pass_seconds_bucket", le="2.0", **k) == 1
        assert value(got, "gpuhint_applier_pass_seconds_bucket", le="1.0", **k) == 0
        assert value(got, "gpuhint_applier_pending_jobs", **k) == 10
        assert value(got, "gpuhint_applier_last_pass_changed", **k) == 4
    finally:
        srv.stop()
    again = m.serve("127.0.0.1", 0)  # a second server on the same registry is fine
    again.stop()


def test_stale_pass_is_not_ready() -> None:
    m = ApplierMetrics("slurm", stale_after_s=0.0)
    m.pass_done(seconds=0.1, pending=0, changed=0)
    ok, why = m.health()
    assert not ok and "ago" in why
    assert m.value("gpuhint_applier_actions_total", action="never") == 0
