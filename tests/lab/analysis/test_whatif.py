"""The "what gpuhint can do" summaries: same numbers as ``evaluate qssf``, honest notes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhint.lab.analysis import whatif
from gpuhint.lab.evaluation.qssf import evaluate_qssf
from gpuhint.lab.traces.readers import read_trace

DATA = Path(__file__).resolve().parents[2] / "data"


def test_blind_rerun_matches_the_main_simulation_when_nothing_is_hidden() -> None:
    """On a trace without users, hiding them changes nothing: the re-simulation must give
    exactly evaluate_qssf's QSSF figure (same hints, same sizes, same simulator)."""
    jobs = read_trace(DATA / "itp_cluster01_400.csv").jobs
    rep = evaluate_qssf(jobs, model="history_mix")
    blind = whatif._qssf_without_users(jobs, "history_mix", rep.vc_sizes)
    assert blind == pytest.approx(rep.avg("qssf"), rel=1e-12)


def test_summary_is_evaluate_qssf(tmp_path: Path) -> None:
    jobs = read_trace(DATA / "venus_qssf_300.csv").jobs
    rep = evaluate_qssf(jobs, model="history_mix")
    s = whatif.qssf_summary(jobs, len(jobs), model="history_mix", plot=tmp_path / "q.png")
    assert s["avg_jct_s"] == {name: r.summary.avg_jct_s for name, r in rep.policies.items()}
    assert s["jct_ratio_qssf_over_oracle"] == rep.ratio("qssf", "qssf-oracle")
    assert s["window"] == "whole trace" and s["plot"] == "q.png"
    assert (tmp_path / "q.png").stat().st_size > 0
    assert s["without_users"] is not None


def test_notes_say_what_is_missing() -> None:
    none = dict.fromkeys(("user", "name", "start_time", "state"), False)
    notes = whatif.predictor_notes(none, None, {"jct_ratio_qssf_over_oracle": 1.5})
    text = " ".join(notes)
    assert "no users" in text and "1.50x the oracle" in text
    assert "no job names" in text and "no start times" in text and "no final states" in text
    full = dict.fromkeys(("user", "name", "start_time", "state"), True)
    notes = whatif.predictor_notes(
        full,
        {"same_user_same_gpus_prior_share": 0.9},
        {"jct_ratio_qssf_over_oracle": 1.2, "without_users": {"jct_ratio_qssf_over_oracle": 2.0}},
    )
    assert len(notes) == 1
    assert "90% of the jobs" in notes[0] and "1.20x" in notes[0] and "2.00x" in notes[0]


def test_what_users_are_worth_follows_the_sign() -> None:
    """Philly: 1.68x with users, 1.65x hidden; hiding them helped, so they are not 'worth'."""
    better_blind = whatif.users_worth(1.68, 1.58)
    assert "better" in better_blind and "worth" not in better_blind
    worse_blind = whatif.users_worth(1.2, 1.5)
    assert "25% worse: that is what users and names are worth here" in worse_blind
    assert "about the same" in whatif.users_worth(1.5, 1.505)
    full = dict.fromkeys(("user", "name", "start_time", "state"), True)
    notes = whatif.predictor_notes(
        full,
        {"same_user_same_gpus_prior_share": 0.9},
        {"jct_ratio_qssf_over_oracle": 1.68, "without_users": {"jct_ratio_qssf_over_oracle": 1.58}},
    )
    assert "misleads the predictor" in notes[0] and "what they are worth" not in notes[0]
