"""``gpuhint serve``'s command line: what its flags promise is what the process does."""

from __future__ import annotations

import argparse
import json
import re
import threading
import urllib.request
from pathlib import Path

import pytest
import redis

from gpuhint.cli import build_parser, serve, slurm
from gpuhint.cores.sink import InMemoryStore, Op
from gpuhint.lab.local.process import free_port
from gpuhint.redis.applier_status import read_passes
from gpuhint.slurm.pass_result import PassResult
from gpuhint.wire.keys import RedisKeys

SQUEUE = Path(__file__).resolve().parents[1] / "data" / "slurm" / "squeue_1.json"


class _Applier:
    def __init__(self) -> None:
        self.passes = 0

    def run_pass(self) -> PassResult:
        self.passes += 1
        return PassResult(
            pending_hinted=2, updated=2, unchanged=0, skipped_pinned=0, skipped_held=0,
            deferred=0, refused=0,
        )  # fmt: skip


def _args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    source = tmp_path / "squeue.txt"
    source.write_text("")
    return build_parser().parse_args(["serve", "--slurm", str(source), "--nodes", "none", *argv])


@pytest.fixture
def site_env(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, unique_prefix: str, tmp_path: Path
) -> _Applier:
    applier = _Applier()
    monkeypatch.setenv("GPUHINT_CLUSTER", "prod")
    monkeypatch.setenv("GPUHINT_REDIS_URL", redis_url)
    monkeypatch.setenv("GPUHINT_KEY_PREFIX", unique_prefix)
    monkeypatch.setenv("GPUHINT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(slurm, "_check_slurm", lambda cli, **kw: None)
    monkeypatch.setattr(slurm, "_priority_applier", lambda *a: applier)
    return applier


def test_slurm_serve_serves_metrics_and_records_its_pass(
    site_env: _Applier, redis_url: str, unique_prefix: str, tmp_path: Path
) -> None:
    """--metrics-port serves the applier's /metrics (docs/slurm.md), and the SiteFactor
    pass is recorded for ``gpuhint status``, as ``apply-priorities`` does."""
    port = free_port()
    _settings, site = serve._slurm_site(_args(tmp_path, "--metrics-port", str(port)))
    [priority] = site.passes
    assert priority.attempt(0.0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    assert 'gpuhint_applier_actions_total{action="set_site_factor",applier="slurm"} 2.0' in body
    r = redis.Redis.from_url(redis_url)
    record = read_passes(r, RedisKeys(unique_prefix), "prod")["slurm-priorities"]
    assert record["ok"] is True and record["result"]["updated"] == 2, json.dumps(record)


class _DownStore(InMemoryStore):
    """Redis down for good: every write refused (``close`` flushes, so it fails too)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = threading.Event()

    def _apply(self, ops: list[Op]) -> None:
        self.refused.set()
        raise ConnectionError("Redis is down")


def test_sigterm_while_redis_is_down_exits_cleanly(
    site_env: _Applier, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stop while Redis is down ends ``serve`` with status 0 and a warning: the held
    writes are made again from the log at the next start (no traceback at exit)."""
    store = _DownStore()
    monkeypatch.setattr(serve, "redis_store", lambda settings: store)
    stop = threading.Event()
    args = _args(tmp_path, "--poll", "0.01")
    args.slurm = str(SQUEUE)  # jobs: the first tick has writes to flush
    threading.Thread(target=lambda: store.refused.wait(30) and stop.set(), daemon=True).start()
    assert serve._serve(args, stop) == 0


def test_once_with_a_failed_pass_is_an_error(
    site_env: _Applier, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--once`` (a check, a cron job) says when its SiteFactor pass failed, as
    ``gpuhint slurm apply-priorities --once`` does, instead of exiting 0."""
    from gpuhint.cli.common import UserError
    from gpuhint.slurm.commands import SlurmCommandError

    def refused() -> PassResult:
        raise SlurmCommandError("squeue: slurm_load_jobs error: Unable to contact slurm controller")

    monkeypatch.setattr(site_env, "run_pass", refused)
    with pytest.raises(UserError, match=r"SiteFactor pass failed: .*Unable to contact"):
        serve._serve(_args(tmp_path, "--once"), threading.Event())


def test_help_names_the_state_directory_the_code_uses() -> None:
    """``serve --help`` says where the SQLite file goes when GPUHINT_STATE_DIR is unset."""
    from gpuhint.wire.config import Settings

    default = Settings.model_fields["state_dir"].default
    said = rf"GPUHINT_STATE_DIR \(default {re.escape(str(default))}[,)]"
    assert re.search(said, " ".join(serve.DESCRIPTION.split())), said


def test_the_power_pass_is_recorded_on_the_same_metrics_server(
    site_env: _Applier, monkeypatch: pytest.MonkeyPatch, redis_url: str, unique_prefix: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """With --apply-power both passes share one /metrics server (one port) and each
    records its pass (``slurm-priorities``, ``slurm-power``) for ``gpuhint status``."""
    from gpuhint.slurm.power import PowerResult

    class Power:
        def run_pass(self, now: float) -> PowerResult:
            return PowerResult(
                target_on=2, on=3, busy=1, powered_down=["gpu3"], powered_up=[], refused=0,
                advice_age_s=5.0,
            )  # fmt: skip

    monkeypatch.setattr(slurm, "_power_applier", lambda *a: Power())
    port = free_port()
    args = _args(tmp_path, "--apply-power", "--metrics-port", str(port))
    args.nodes = str(SQUEUE.parent / "sinfo_2205.json")
    _settings, site = serve._slurm_site(args)
    assert [p.name for p in site.passes] == ["SiteFactor", "power"]
    assert all(p.attempt(0.0) for p in site.passes)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        body = resp.read().decode()
    assert 'gpuhint_applier_actions_total{action="power_down",applier="slurm"} 1.0' in body
    r = redis.Redis.from_url(redis_url)
    passes = read_passes(r, RedisKeys(unique_prefix), "prod")
    assert passes["slurm-power"]["result"]["powered_down"] == ["gpu3"], passes
    assert passes["slurm-priorities"]["ok"] is True


@pytest.mark.parametrize(
    ("error", "kind"), [("kube", "api"), ("redis", "redis"), ("bug", "internal")]
)
def test_a_failed_kueue_pass_is_counted_in_its_metrics(
    monkeypatch: pytest.MonkeyPatch, error: str, kind: str
) -> None:
    """``serve --kueue``'s failed pass counts in /metrics as ``kueue apply-priorities``'s
    does (an API or Redis outage, or a bug), besides its record for ``gpuhint status``."""
    from gpuhint.cli import kueue
    from gpuhint.kueue.kube import KubeError
    from gpuhint.metrics.applier import ApplierMetrics

    metrics = ApplierMetrics("kueue")
    records: list[dict[str, object]] = []
    raised = {
        "kube": KubeError(0, "the API server does not answer"),
        "redis": redis.ConnectionError("Redis is down"),
        "bug": KeyError("spec"),
    }[error]

    def failing(*a: object) -> None:
        raise raised

    monkeypatch.setattr(kueue, "_ladder", lambda ks: None)
    monkeypatch.setattr(kueue, "_backend", lambda ks: argparse.Namespace(sync=lambda: None))
    monkeypatch.setattr(kueue, "build_applier", lambda *a: (None, None))
    monkeypatch.setattr(kueue, "_recorder", lambda *a: lambda **kw: records.append(kw))
    monkeypatch.setattr(kueue, "_metrics", lambda common: metrics)
    monkeypatch.setattr(kueue, "ensure_classes", lambda *a: None)
    monkeypatch.setattr(kueue, "one_pass", failing)
    kargs = argparse.Namespace(once=True, dry_run=False)
    p = serve._kueue_pass(kargs, None, argparse.Namespace(interval_s=5.0), threading.Event())
    assert not p.attempt(0.0)
    assert records and records[-1]["ok"] is False
    got = metrics.registry.get_sample_value(
        "gpuhint_applier_errors_total", {"applier": "kueue", "kind": kind}
    )
    assert got == 1.0


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://:secret@cache.example:6380/2", "redis://cache.example:6380"),
        ("rediss://user:secret@cache.example/0", "rediss://cache.example:6379"),
        ("unix:///run/redis/redis.sock?db=1", "unix:///run/redis/redis.sock"),
    ],
)
def test_the_start_line_names_redis_without_its_password(url: str, said: str) -> None:
    from pydantic import SecretStr

    assert serve._redacted(argparse.Namespace(redis_url=SecretStr(url))) == said


def test_once_with_an_unreadable_scheduler_is_an_error(site_env: _Applier, tmp_path: Path) -> None:
    """``--once`` whose one poll could not read the scheduler (sacct failing, slurmdbd
    down) did not do its job: an error, not exit 0 after a "will retry" warning."""
    from gpuhint.cli.common import UserError

    args = _args(tmp_path, "--once")
    args.slurm = "cmd:false"
    with pytest.raises(UserError, match="job events could not be read"):
        serve._serve(args, threading.Event())


def test_another_clusters_state_file_is_a_user_error_not_a_traceback(
    site_env: _Applier, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The feed's watermark of another cluster (a state file copied, or GPUHINT_CLUSTER
    changed) stops ``serve`` with one line naming the file (before: a ValueError
    traceback at every start)."""
    from gpuhint.cli.common import UserError
    from gpuhint.serve.local_log import LocalLog
    from gpuhint.serve.server import WATERMARK_META

    state = tmp_path / "state"
    state.mkdir()
    log = LocalLog(state / "serve-prod.sqlite", topic="gpuhint.job-events")
    log.append([], meta={WATERMARK_META: json.dumps({"version": 1, "cluster": "other"})})
    log.close()
    with pytest.raises(UserError, match=r"serve-prod\.sqlite cannot be used: .*'other'"):
        serve._serve(_args(tmp_path, "--once"), threading.Event())


def test_serve_started_while_slurmctld_is_down_retries_unless_once(
    site_env: _Applier, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As the appliers: a daemon warns and its passes retry (exit 2 would keep a
    systemd unit down for good); ``--once`` fails at once."""
    seen: list[bool] = []
    monkeypatch.setattr(slurm, "_check_slurm", lambda cli, *, once=True: seen.append(once))
    serve._slurm_site(_args(tmp_path))
    serve._slurm_site(_args(tmp_path, "--once"))
    assert seen == [False, True]
