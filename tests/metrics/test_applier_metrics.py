"""The appliers' metrics helper, served and scraped over real HTTP."""

from __future__ import annotations

from gpuhint.lab.local.metrics_docs import undocumented
from gpuhint.lab.local.scrape import get, samples, value
from gpuhint.metrics.applier import ApplierMetrics


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
        assert not undocumented({n for n, _ in got}), "add them to docs/metrics.md"
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


def test_pass_results_of_both_appliers_map_to_metrics() -> None:
    from gpuhint.kueue.applier import PassReport
    from gpuhint.slurm.power import PowerResult
    from gpuhint.slurm.priority import PassResult

    k = ApplierMetrics("kueue")
    k.observe_kueue_pass(
        PassReport(
            workloads=9, pending=6, hints=5, relabelled=3, unchanged=1, refused=1, errors=2,
            skipped={"admitted": 3, "preemption-guard": 1}, seconds=0.4,
        )
    )  # fmt: skip
    assert k.value("gpuhint_applier_actions_total", action="relabel") == 3
    assert k.value("gpuhint_applier_refusals_total", reason="preemption_guard") == 1
    assert k.value("gpuhint_applier_refusals_total", reason="admitted_meanwhile") == 1
    assert k.value("gpuhint_applier_errors_total", kind="api") == 2
    assert k.value("gpuhint_applier_pending_jobs") == 6
    k.observe_kueue_pass(PassReport(pending=2, dry_run=True, planned=[{}, {}], seconds=0.1))
    assert k.value("gpuhint_applier_refusals_total", reason="dry_run") == 2
    assert k.value("gpuhint_applier_actions_total", action="relabel") == 3

    s = ApplierMetrics("slurm")
    s.observe_slurm_priorities(
        PassResult(
            pending_hinted=10, updated=4, unchanged=3, skipped_pinned=1, skipped_held=1,
            deferred=2, refused=1, seconds=0.2,
        ),
        dry_run=False,
    )  # fmt: skip
    assert s.value("gpuhint_applier_actions_total", action="set_site_factor") == 4
    assert s.value("gpuhint_applier_refusals_total", reason="rate_limited") == 2
    assert s.value("gpuhint_applier_refusals_total", reason="slurm_refused") == 1
    s.observe_slurm_power(
        PowerResult(
            target_on=3, on=5, busy=2, powered_down=["n4", "n5"], powered_up=[], refused=0,
            advice_age_s=12.0, held_back=1,
        ),
        seconds=0.05,
        dry_run=False,
    )  # fmt: skip
    assert s.value("gpuhint_applier_actions_total", action="power_down") == 2
    assert s.value("gpuhint_applier_refusals_total", reason="held_back") == 1
    assert s.value("gpuhint_applier_pass_seconds_count") == 2
    assert s.value("gpuhint_applier_pending_jobs") == 10  # a power pass leaves it alone


def test_expected_starts_written_where_users_look_are_counted() -> None:
    from gpuhint.kueue.applier import PassReport
    from gpuhint.slurm.priority import PassResult

    s = ApplierMetrics("slurm")
    comments = {
        "comments_set": 5, "comments_cleared": 2, "comments_unchanged": 7,
        "comments_user_kept": 1, "comments_deferred": 3, "comments_refused": 1,
    }  # fmt: skip
    result = PassResult(
        pending_hinted=10, updated=0, unchanged=10, skipped_pinned=0, skipped_held=0,
        deferred=0, refused=0, start_comment=True, comments=comments,
    )  # fmt: skip
    s.observe_slurm_priorities(result, dry_run=False)
    assert s.value("gpuhint_applier_actions_total", action="start_set") == 5
    assert s.value("gpuhint_applier_actions_total", action="start_cleared") == 2
    assert s.value("gpuhint_applier_refusals_total", reason="user_comment_kept") == 1
    assert s.value("gpuhint_applier_refusals_total", reason="start_rate_limited") == 3
    assert s.value("gpuhint_applier_refusals_total", reason="start_refused") == 1
    s.observe_slurm_priorities(result, dry_run=True)  # planned, not written
    assert s.value("gpuhint_applier_actions_total", action="start_set") == 5
    assert s.value("gpuhint_applier_refusals_total", reason="dry_run") == 7
    off = ApplierMetrics("slurm")  # comments off: nothing counted
    off.observe_slurm_priorities(PassResult(1, 0, 1, 0, 0, 0, 0), dry_run=False)
    assert off.value("gpuhint_applier_refusals_total", reason="user_comment_kept") == 0

    k = ApplierMetrics("kueue")
    k.observe_kueue_pass(
        PassReport(pending=4, expected_start=True, starts_annotated=3, starts_cleared=1)
    )
    assert k.value("gpuhint_applier_actions_total", action="start_set") == 3
    assert k.value("gpuhint_applier_actions_total", action="start_cleared") == 1
