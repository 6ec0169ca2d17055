"""The configuration files of :class:`~gpuhint.lab.local.slurm.LocalSlurm`, as text.

``slurm.conf`` (priority = SiteFactor only, power saving through the two scripts),
``gres.conf`` (fake GPUs), the SuspendProgram/ResumeProgram scripts and ``slurmdbd.conf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmSpec(Protocol):
    """What the files say: :class:`~gpuhint.lab.local.slurm.LocalSlurm` has it all."""

    dir: Path
    conf: Path
    cluster_name: str
    nodes: int
    gpus: int
    cpus: int
    sched: str
    accounting: bool
    suspend_time: int
    boot_delay_s: float
    extra_conf: list[str]
    ctld_port: int
    node_port: int
    dbd_port: int
    db_port: int


def slurm_conf(s: SlurmSpec) -> str:
    """``slurm.conf`` of the cluster."""
    d = s.dir
    last = s.node_port + s.nodes - 1
    acct = (
        [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={s.dbd_port}",
            # connections to slurmdbd take the munge socket from AccountingStoragePass
            f"AccountingStoragePass={d / 'munge' / 'munge.socket'}",
            "AccountingStorageTRES=gres/gpu",
        ]
        if s.accounting
        else ["AccountingStorageType=accounting_storage/none"]
    )
    lines = [
        f"ClusterName={s.cluster_name}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={s.ctld_port}",
        f"SlurmdPort={s.node_port}",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool'}/%n",
        f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run'}/slurmd-%n.pid",
        f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={d / 'log'}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        *acct,
        "JobCompType=jobcomp/none",
        f"SchedulerType=sched/{s.sched}",
        "SchedulerParameters=bf_interval=2,sched_interval=1",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MinJobAge=300",
        "KillWait=2",
        "OverTimeLimit=0",
        "GresTypes=gpu",
        # priority = SiteFactor only (22.05 adds the site factor unweighted)
        "PriorityType=priority/multifactor",
        "PriorityCalcPeriod=1",
        "PriorityWeightAge=0",
        "PriorityWeightFairshare=0",
        "PriorityWeightJobSize=0",
        "PriorityWeightPartition=0",
        "PriorityWeightQOS=0",
        f"SuspendProgram={d / 'bin' / 'suspend.sh'}",
        f"ResumeProgram={d / 'bin' / 'resume.sh'}",
        f"SuspendTime={s.suspend_time}",
        "SuspendTimeout=5",
        # a loaded 2-core host can take >30 s to start slurmd; a "boot" takes boot_delay_s more
        f"ResumeTimeout={60 + 2 * int(s.boot_delay_s)}",
        "SuspendRate=0",
        "ResumeRate=0",
        f"NodeName=n[1-{s.nodes}] NodeHostname=localhost NodeAddr=127.0.0.1 "
        f"Port=[{s.node_port}-{last}] CPUs={s.cpus} RealMemory=16000 "
        f"Gres=gpu:{s.gpus} State=UNKNOWN",
        f"PartitionName=gpu Nodes=n[1-{s.nodes}] Default=YES MaxTime=INFINITE State=UP",
        *s.extra_conf,
    ]
    return "\n".join(lines) + "\n"


def gres_conf(s: SlurmSpec) -> str:
    """``gres.conf``: each node's GPUs are files under ``dev/`` (links to /dev/null)."""
    d = s.dir
    return (
        "AutoDetect=off\n"
        f"NodeName=n[1-{s.nodes}] Name=gpu File={d / 'dev'}/fakegpu[0-{s.gpus - 1}]\n"
    )


def power_scripts(s: SlurmSpec) -> dict[str, str]:
    """SuspendProgram and ResumeProgram, by file name (for ``bin/``)."""
    d = s.dir
    power = d / "log" / "power.log"
    head = f"#!/bin/sh\nexec </dev/null >>{power} 2>&1\nexport PATH={SBIN} SLURM_CONF={s.conf}\n"
    # SuspendProgram: "power off" = stop that node's slurmd
    suspend = (
        head + 'echo "$(date +%FT%T) suspend $*"\n'
        'for n in $(scontrol show hostnames "$1"); do\n'
        f"  pf={d / 'run'}/slurmd-$n.pid\n"
        '  [ -f "$pf" ] && kill "$(cat "$pf")" 2>/dev/null\n'
        "done\nexit 0\n"
    )
    # ResumeProgram: (re)start slurmd with -b ("booted now"), else the node goes DOWN;
    # a file run/resume-fails-NODE makes that node's "boot" fail (a resume-failure test).
    # A "boot" waits boot_delay_s, then starts the node's slurmd.
    boot = (
        'boot() { sleep "$1"\n'
        f'  slurmd -b -f {s.conf} -N "$2" || echo "resume $2: slurmd did not start"\n'
        "}\n"
    )
    resume = (
        head + boot + 'echo "$(date +%FT%T) resume $*"\n'
        'for n in $(scontrol show hostnames "$1"); do\n'
        f'  [ -f {d / "run"}/resume-fails-$n ] && {{ echo "resume $n fails"; continue; }}\n'
        f"  pf={d / 'run'}/slurmd-$n.pid\n"
        # the old slurmd must be gone before the new one binds its port: a loaded host
        # can take seconds to stop it, and a new slurmd that cannot bind never registers
        '  pid=$(cat "$pf" 2>/dev/null)\n'
        '  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then\n'
        '    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do\n'
        "      sleep 0.1; i=$((i+1))\n"
        "    done\n"
        '    kill -9 "$pid" 2>/dev/null && sleep 0.5\n'
        "  fi\n"
        # no delay: at once; a delay: in the background, so the nodes boot in parallel
        f'  boot {s.boot_delay_s:g} "$n"{" &" if s.boot_delay_s > 0 else ""}\n'
        "done\nexit 0\n"
    )
    return {"suspend.sh": suspend, "resume.sh": resume}


def slurmdbd_conf(s: SlurmSpec) -> str:
    """``slurmdbd.conf`` against the private MariaDB."""
    d = s.dir
    return (
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={d / 'munge' / 'munge.socket'}",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={s.dbd_port}",
                "CommunicationParameters=NoInAddrAny",
                "SlurmUser=root",
                f"LogFile={d / 'log' / 'slurmdbd.log'}",
                f"PidFile={d / 'run' / 'slurmdbd.pid'}",
                "DebugLevel=info",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={s.db_port}",
                "StorageUser=root",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )
