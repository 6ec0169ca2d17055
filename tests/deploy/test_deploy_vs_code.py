"""The deployment files checked against the code they run, without Docker or kubectl:
every ``GPUHINT_*`` name they set is a setting and its value loads; every command line
they start parses with gpuhint's own argparse parser; probes ask paths the metrics server
serves on the port the process is told; the ClusterRoles cover every API call of
gpuhint/kueue (and no more verbs than those); the Slurm wrappers run the gpuhint the
units install; the commands the compose file suggests ask for the cluster it fills."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuhint.cli import build_parser
from gpuhint.cli.common import command_env_names
from gpuhint.kueue.kube import PATHS
from gpuhint.kueue.settings import KueueSettings
from gpuhint.slurm.settings import SlurmSettings
from gpuhint.wire.config import OTHER_ENV, Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
UNITS = sorted((ROOT / "deploy").rglob("*.service"))
VENV_BIN = "/opt/gpuhint/venv/bin/gpuhint"
KNOWN = {f"GPUHINT_{f}".upper() for f in Settings.model_fields} | OTHER_ENV | command_env_names()
SERVED = {"/metrics", "/healthz", "/readyz", "/livez"}  # gpuhint/metrics/server.py


def _k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _k8s_containers() -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """(workload, container, the env it gets) for every gpuhint container."""
    docs = _k8s_docs()
    maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}
    secrets = {
        d["metadata"]["name"]: d.get("stringData") or {} for d in docs if d["kind"] == "Secret"
    }
    for doc in docs:
        if doc["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            env: dict[str, str] = {}
            for ref in c.get("envFrom", []):
                if "configMapRef" in ref:
                    env.update(maps[ref["configMapRef"]["name"]])
                elif ref["secretRef"].get("optional"):  # may be created by hand, or not
                    env.update(secrets.get(ref["secretRef"]["name"], {}))
                else:
                    env.update(secrets[ref["secretRef"]["name"]])
            for e in c.get("env", []):
                env[e["name"]] = str(e.get("value", "node-1"))  # valueFrom: a node name
            yield f"{doc['kind']} {doc['metadata']['name']}", c, env


def _compose_value(value: Any) -> str:
    """``${X:-default}`` as its default, ``${X:?why}`` as a value given."""
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(value))
    return re.sub(r"\$\{[A-Z_]+:\?[^}]*\}", "s3cret", text)


def _compose_services() -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """(service, argv after ``gpuhint``, env) for every gpuhint service."""
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, svc in data["services"].items():
        if not str(svc.get("image", "")).startswith("gpuhint"):
            continue
        env = {k: _compose_value(v) for k, v in (svc.get("environment") or {}).items()}
        if svc.get("entrypoint"):  # sh -c "gpuhint ..."
            argv = shlex.split(_compose_value(svc["command"][-1]).replace("$$(", "X"))
            argv = argv[argv.index("gpuhint") + 1 :]
        else:
            argv = [_compose_value(a) for a in svc.get("command", [])]  # [] : CMD --help
        yield name, argv, env


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def _unit_env_example(path: Path) -> dict[str, str]:
    """The env file shown in a unit's header, its commented-out lines too (``# NAME=``),
    read as systemd reads an EnvironmentFile: one ``NAME=value`` a line, the value the
    rest of the line (a trailing note included)."""
    env = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^#\s+(?:#\s*)?(GPUHINT_[A-Z0-9_]+|SLURM_CONF)=(.*)$", line)
        if m:
            env[m.group(1)] = m.group(2).strip()
    return env


def _unit_argv(path: Path) -> list[str]:
    """ExecStart after the binary, ``$NAME`` split into words as systemd does, from the
    header's env file (the lines a site is told to uncomment included)."""
    argv = shlex.split(_unit(path)["Service"]["ExecStart"])
    assert argv[0] == VENV_BIN, path.name
    env = _unit_env_example(path)
    out: list[str] = []
    for a in argv[1:]:
        out += env.get(a[1:], "").split() if a.startswith("$") else [a]
    return out


def _load_all(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], argv: list[str]) -> None:
    """Load the settings ``argv`` reads under ``env`` alone; fail with the reason."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("GPUHINT_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    load_settings()
    if argv[:1] == ["kueue"]:
        KueueSettings()
    if argv[:1] == ["slurm"]:
        SlurmSettings()


def _all_env() -> Iterator[tuple[str, dict[str, str], list[str]]]:
    for where, c, env in _k8s_containers():
        yield where, env, list(c["args"])
    for name, argv, env in _compose_services():
        yield f"compose {name}", env, argv
    for path in UNITS:
        yield path.name, _unit_env_example(path), _unit_argv(path)


@pytest.mark.parametrize("where,env,argv", list(_all_env()), ids=lambda v: str(v)[:40])
def test_every_setting_a_deploy_file_sets_is_read_and_loads(
    where: str, env: dict[str, str], argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = {k for k in env if k.startswith("GPUHINT_") and k not in KNOWN}
    assert not unknown, (where, unknown)
    _load_all(monkeypatch, {k: v for k, v in env.items() if k.startswith("GPUHINT_")}, argv)


@pytest.mark.parametrize("where,env,argv", list(_all_env()), ids=lambda v: str(v)[:40])
def test_every_command_line_parses(where: str, env: dict[str, str], argv: list[str]) -> None:
    if not argv:  # the image's own CMD runs: it must be one the parser takes
        cmd = re.search(r"^CMD (\[.*\])$", (ROOT / "Dockerfile").read_text(), re.M)
        assert cmd is not None, f"{where}: no command and no CMD in the Dockerfile"
        argv = json.loads(cmd.group(1))
        if argv == ["--help"]:
            with pytest.raises(SystemExit) as done:
                build_parser().parse_args(argv)
            assert done.value.code == 0, where
            return
    args = build_parser().parse_args(argv)  # an unknown flag exits 2
    assert args.command is not None, where


def _slurm_wrapper_argv(path: Path) -> list[str]:
    text = path.read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("exec ") and "gpuhint" in ln)
    return shlex.split(line)[1:]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "deploy" / "slurm").iterdir()), ids=lambda p: p.name
)
def test_slurm_wrappers_run_the_gpuhint_the_units_install(path: Path) -> None:
    argv = _slurm_wrapper_argv(path)
    assert argv[0] == VENV_BIN, (path.name, argv[0])
    args = build_parser().parse_args([a.replace("$1", "gpu[01-02]") for a in argv[1:]])
    assert args.command == "slurm", path.name


def test_probes_ask_served_paths_on_the_port_the_process_serves() -> None:
    for where, c, env in _k8s_containers():
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        assert str(ports["metrics"]) == env.get("GPUHINT_METRICS_PORT"), where
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            assert get["path"] in SERVED and get["port"] == "metrics", (where, probe)


def test_a_liveness_probe_does_not_restart_a_process_for_an_outage() -> None:
    """The worker's and the appliers' /healthz fail while Kafka, Redis or the API server
    is away (docs/metrics.md); a restart does not bring those back: liveness is /livez."""
    for where, c, _env in _k8s_containers():
        if c["args"][0] != "agent":  # the agent's /healthz: its own sampling loop ticks
            assert c["livenessProbe"]["httpGet"]["path"] == "/livez", where


def _rules(role: str) -> set[tuple[str, str, str]]:
    doc = next(
        d for d in _k8s_docs() if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role
    )
    return {
        (g, r, v)
        for rule in doc["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _resource(path: str) -> tuple[str, str]:
    """``/apis/GROUP/VERSION/PLURAL`` -> (group, plural)."""
    parts = path.strip("/").split("/")
    return (parts[1] if parts[0] == "apis" else ""), parts[-1]


def _needs(kinds: dict[str, tuple[str, ...]]) -> set[tuple[str, str, str]]:
    return {(*_resource(PATHS[k]), v) for k, verbs in kinds.items() for v in verbs}


def test_each_cluster_role_grants_what_its_code_calls_and_no_more() -> None:
    """gpuhint/kueue/kube.py: the applier lists and watches four kinds (Reflector),
    patches Jobs (relabel / unlabel) and Workloads (annotate), lists, creates and patches
    WorkloadPriorityClasses (ensure_classes); gpuhint/kueue/pods.py: the agent's source
    lists LocalQueues, Workloads and Jobs."""
    read = ("list", "watch")
    applier = _needs(
        {
            "workloads": (*read, "patch"),
            "jobs": (*read, "patch"),
            "localqueues": read,
            "clusterqueues": read,
            "workloadpriorityclasses": ("list", "create", "patch"),
        }
    )
    agent = _needs({k: ("list",) for k in ("localqueues", "workloads", "jobs")})
    for role, needed in (("gpuhint-kueue-applier", applier), ("gpuhint-kueue-agent", agent)):
        granted = _rules(role)
        assert needed <= granted, (role, needed - granted)
        extra = {g for g in granted - needed if g[2] not in ("get", "watch")}
        assert not extra, (role, extra)  # get / watch of what it reads: harmless


def test_the_compose_files_suggested_commands_ask_for_the_cluster_replay_fills() -> None:
    """`docker compose run --rm replay` publishes under the replay service's cluster;
    a `--cluster` in the file's own instructions must name that one."""
    text = (ROOT / "docker-compose.yml").read_text()
    replay = dict((n, (a, e)) for n, a, e in _compose_services())["replay"]
    argv, env = replay
    cluster = argv[argv.index("--cluster") + 1] if "--cluster" in argv else env["GPUHINT_CLUSTER"]
    asked = re.findall(r"^#.*--cluster[ =](\S+)", text, flags=re.M)
    assert set(asked) <= {cluster}, (asked, cluster)
    assert re.search(r"^#.*run --rm cli hints\b", text, flags=re.M)  # GPUHINT_CLUSTER's


def _defines_and_needs(path: Path) -> tuple[set[str], set[str]]:
    """(ConfigMaps / Secrets a manifest defines, those its pods need, not optional)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    defined = {d["metadata"]["name"] for d in docs if d["kind"] in ("ConfigMap", "Secret")}
    needed = set()
    for d in docs:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for ref in c.get("envFrom", []):
                target = ref.get("configMapRef") or ref.get("secretRef")
                if not target.get("optional"):
                    needed.add(target["name"])
    return defined, needed


def _apply_sequences() -> Iterator[tuple[str, list[str]]]:
    """Each documented sequence of `kubectl apply -f deploy/k8s/...` commands, in order:
    the step-by-step of docs/kubernetes.md, and each manifest's own header line."""
    steps = re.findall(r"kubectl .*apply (.*)", (ROOT / "docs" / "kubernetes.md").read_text())
    yield "docs/kubernetes.md", [f for s in steps for f in re.findall(r"-f (\S+\.yaml)", s)]
    for path in sorted(K8S.glob("*.yaml")):
        for line in re.findall(r"^#.*kubectl .*apply (-f .*)", path.read_text(), flags=re.M):
            yield path.name, re.findall(r"-f (\S+\.yaml)", line)


@pytest.mark.parametrize("where,files", list(_apply_sequences()), ids=lambda v: str(v)[:30])
def test_documented_applies_define_what_each_pod_needs_first(where: str, files: list[str]) -> None:
    """A pod whose ConfigMap or Secret was never applied waits in CreateContainerConfigError."""
    defined: set[str] = set()
    for name in files:
        made, needed = _defines_and_needs(ROOT / name)
        defined |= made
        assert needed <= defined, (where, name, needed - defined)


def test_the_images_user_is_the_one_the_pods_run_as() -> None:
    text = (ROOT / "Dockerfile").read_text()
    uid = re.search(r"useradd [^\n]*--uid (\d+)", text)
    gid = re.search(r"groupadd [^\n]*--gid (\d+)", text)
    assert uid and gid  # USER numeric: runAsNonRoot cannot check a name
    assert re.search(rf"^USER {uid.group(1)}:{gid.group(1)}$", text, flags=re.M)
    for doc in _k8s_docs():
        pod = doc.get("spec", {}).get("template", {}).get("spec")
        if pod:
            ctx = pod["securityContext"]
            assert ctx["runAsNonRoot"] and str(ctx["runAsUser"]) == uid.group(1), doc["kind"]
            assert str(ctx.get("runAsGroup", gid.group(1))) == gid.group(1), doc["kind"]


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_a_unit_that_reads_nvml_keeps_the_gpu_devices(path: Path) -> None:
    """ProtectClock=yes implies DeviceAllow=char-rtc, which before systemd 253 (Ubuntu
    22.04, Debian 11, RHEL 8) turns the default device policy into an allow-list: NVML
    cannot open /dev/nvidiactl and the agent exits 2, never restarted (systemd#18142)."""
    service = _unit(path)["Service"]
    if "--nvml none" in service["ExecStart"]:
        return
    allowed = service.get("DeviceAllow", "")
    if service.get("ProtectClock", "no") == "yes" or service.get("DevicePolicy"):
        assert "nvidia" in allowed, path.name


TOPIC_SETTINGS = ("kafka_bootstrap", "topic_prefix", "partitions", "replication_factor")


def _topic_settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> tuple[Any, ...]:
    _load_all(monkeypatch, {k: v for k, v in env.items() if k.startswith("GPUHINT_")}, [])
    settings = load_settings()
    return tuple(getattr(settings, f) for f in TOPIC_SETTINGS)


def test_every_topic_creator_of_one_deployment_creates_the_same_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Agents and replay create gpuhint's topics too when they come first (streams/
    kafka_io.py ensure_topics; the DaemonSet is step 1 of docs/kubernetes.md), and the
    worker never changes a topic's replication factor: each must ask what the worker asks."""
    k8s = {
        where: _topic_settings(monkeypatch, env)
        for where, c, env in _k8s_containers()
        if c["args"][0] in ("agent", "worker")
    }
    assert len(set(k8s.values())) == 1, k8s
    compose = {
        f"compose {name}": _topic_settings(monkeypatch, env)
        for name, argv, env in _compose_services()
        if argv[:1] in (["agent"], ["worker"], ["replay"])
    }
    assert len(set(compose.values())) == 1, compose
    import tomllib

    toml = tomllib.loads((ROOT / "deploy" / "gpuhint.example.toml").read_text())
    for path in UNITS:
        if _unit_argv(path)[0] == "agent":
            got = _topic_settings(monkeypatch, _unit_env_example(path))
            want = {f: toml[f] for f in ("partitions", "replication_factor")}
            assert dict(zip(TOPIC_SETTINGS[2:], got[2:], strict=True)) == want, path.name
