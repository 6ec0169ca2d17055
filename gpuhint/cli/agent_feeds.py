"""``gpuhint agent``'s scheduler sources: the ``--slurm``, ``--slurm-nodes`` and
``--kubernetes`` flags, checked, and the feeds they make."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuhint.cli.common import UserError, one_line

if TYPE_CHECKING:
    from gpuhint.cores.job_tracker import SchedulerFeed
    from gpuhint.wire.config import Settings


def add_scheduler_args(p: argparse.ArgumentParser) -> None:
    """Where job events come from: Slurm or Kubernetes."""
    p.add_argument(
        "--slurm",
        metavar="SOURCE",
        help="Slurm job events from: sacct (sacct --json -a -X from the watermark, else the "
        "last hour; needs slurmdbd), squeue (squeue --all --states=all --json), cmd:COMMAND, "
        "or a FILE re-read every interval (squeue/sacct JSON or sacct --parsable2 output)",
    )
    p.add_argument(
        "--slurm-state",
        metavar="FILE",
        help="Slurm watermark file: a restarted agent publishes no duplicate and, with "
        "--slurm sacct, misses no transition (default: none, a restart starts fresh)",
    )
    add_slurm_vc_arg(p)
    p.add_argument(
        "--slurm-nodes",
        metavar="SOURCE",
        help="every Slurm node's NodeStatus (for CES) from: sinfo (sinfo -N --json), cmd:COMMAND, "
        "or a FILE re-read every interval (sinfo --json output); default: none",
    )
    p.add_argument(
        "--kubernetes",
        metavar="SOURCE",
        help="GPU job events from: kueue (Kueue-managed Jobs and their Workloads through the "
        "API: in-cluster or $KUBECONFIG; job id = label gpuhint.io/job-id, else the Job's UID), "
        "kubectl (pods: kubectl get pods -A -o json), cmd:COMMAND, or a FILE with a PodList JSON",
    )
    p.add_argument(
        "--kubernetes-state",
        metavar="FILE",
        help="Kubernetes watermark file, written once the events it counts are sent: a "
        "restarted agent publishes no duplicate, and a Job or pod deleted while it was down "
        "is published finished CANCELLED (default: none, a restart starts fresh)",
    )


def add_slurm_vc_arg(p: argparse.ArgumentParser) -> None:
    """``--slurm-vc``: which of a Slurm job's account and partition is its VC."""
    p.add_argument(
        "--slurm-vc",
        choices=["account", "partition"],
        default="account",
        help="VC of a Slurm job: its account, else its partition (default), or the reverse",
    )


def make_feeds(args: argparse.Namespace, settings: Settings) -> list[SchedulerFeed]:
    """The scheduler event sources of ``--slurm`` and ``--kubernetes``."""
    from gpuhint.slurm.feed import slurm_feed
    from gpuhint.slurm.jobs import slurm_source

    feeds: list[SchedulerFeed] = []
    both = args.slurm_state and args.kubernetes_state
    if both and Path(args.slurm_state).resolve() == Path(args.kubernetes_state).resolve():
        raise UserError("--slurm-state and --kubernetes-state name the same file: one each")
    if args.slurm:
        check_source("slurm", slurm_source(args.slurm))
        try:
            feeds.append(
                slurm_feed(
                    args.slurm,
                    cluster=settings.cluster,
                    state_path=Path(args.slurm_state) if args.slurm_state else None,
                    vc_from=args.slurm_vc,
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--slurm-state: {exc}") from None
    elif args.slurm_state:
        raise UserError("--slurm-state needs --slurm")
    if args.kubernetes:
        feeds.append(_kubernetes_feed(args.kubernetes, args.kubernetes_state, settings.cluster))
    elif args.kubernetes_state:
        raise UserError("--kubernetes-state needs --kubernetes")
    return feeds


def make_node_feeds(
    args: argparse.Namespace, settings: Settings, feeds: list[SchedulerFeed]
) -> list[Any]:
    """``--slurm-nodes``: every Slurm node's status, with its running jobs from the job feed."""
    from gpuhint.slurm.nodes import SlurmNodeFeed, slurm_node_source

    if not args.slurm_nodes:
        return []
    source = slurm_node_source(args.slurm_nodes)
    check_source("slurm-nodes", source)
    slurm_jobs = next((f for f in feeds if f.name == "slurm"), None)
    return [
        SlurmNodeFeed(
            source,
            cluster=settings.cluster,
            running_on=slurm_jobs.tracker.running_on if slurm_jobs else None,
        )
    ]


def _kubernetes_feed(spec: str, state: str | None, cluster: str) -> SchedulerFeed:
    """The feed of ``--kubernetes SPEC`` with its ``--kubernetes-state`` watermark."""
    from gpuhint.kueue.kube import KubeError
    from gpuhint.kueue.pods import kubernetes_source, kueue_feed, pods_feed

    state_path = Path(state) if state else None
    try:
        if spec == "kueue":
            kubeconfig = os.environ.get("KUBECONFIG") or None
            return kueue_feed(cluster=cluster, state_path=state_path, kubeconfig=kubeconfig)
        check_source("kubernetes", kubernetes_source(spec))
        return pods_feed(spec, cluster=cluster, state_path=state_path)
    except KubeError as exc:
        raise UserError(f"--kubernetes kueue: {exc}") from None
    except (ValueError, KeyError, TypeError) as exc:  # another cluster's file, or damaged
        if state_path is None:
            raise
        raise UserError(f"--kubernetes-state: {one_line(str(exc))}") from None


_KNOWN_SOURCES = {
    "slurm": "squeue, sacct, cmd:COMMAND",
    "slurm-nodes": "sinfo, cmd:COMMAND",
    "kubernetes": "kueue, kubectl, cmd:COMMAND",
}
"""What each source flag takes besides a file (its error message)."""


def check_source(name: str, source: str | tuple[str, ...]) -> None:
    import shutil

    if isinstance(source, tuple):
        if shutil.which(source[0]) is None:
            raise UserError(f"--{name}: {source[0]} is not on PATH")
    elif source.startswith("cmd:"):
        argv = shlex.split(source[4:])
        if not argv:
            raise UserError(f"--{name}: cmd: needs a command")
        if shutil.which(argv[0]) is None:
            raise UserError(f"--{name}: {argv[0]} is not on PATH")
    elif not Path(source).is_file():
        raise UserError(
            f"--{name}: {source} is neither a file nor a known source "
            f"({_KNOWN_SOURCES.get(name, 'cmd:COMMAND')})"
        )
    elif not os.access(source, os.R_OK):
        raise UserError(f"--{name}: {source} is not readable")
