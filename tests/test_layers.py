"""Imports flow one way, floor by floor; the folders are the floors.

Every module of the shipped packages (``gpuhint``, ``models``, ``streams``, ``agents``) is
parsed (``ast``, nothing is imported) and takes the floor of its folder (the nearest
folder named in :data:`FLOOR_OF_FOLDER`; a rule names folders, never modules). An import,
at module scope or inside a function, may only name a module of the same or a lower
floor. The pure floors import no Kafka, Faust, Redis, NVML or Kubernetes library. The
system homes (one folder per outside system) may use each other, but the folders form no
circle, and no two modules import each other, even lazily.

    wire -> models -> cores -> systems (streams, redis, slurm, kueue, metrics)
         -> processes (agents, serve) -> lab -> cli
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpuhint", "models", "streams", "agents")
FLOORS = ("wire", "models", "cores", "systems", "processes", "lab", "cli")
EDGE_LIBRARIES = frozenset({"faust", "mode", "kafka", "aiokafka", "redis", "pynvml", "kubernetes"})

# One rule per folder; a folder not named takes the floor of the nearest named one above.
FLOOR_OF_FOLDER: dict[str, str] = {
    "gpuhint/wire": "wire",  # schemas, Redis keys, topics, settings
    "models": "models",  # duration models, forecaster, power policy, scheduler simulator
    "gpuhint/cores": "cores",  # QSSF and CES engines, the sink interface, the message path
    "streams": "systems",  # Kafka and Faust
    "gpuhint/redis": "systems",  # Redis: the store and the reader
    "gpuhint/slurm": "systems",  # Slurm: its feed, its appliers, its parsing
    "gpuhint/kueue": "systems",  # Kubernetes and Kueue: the pod feed, the applier
    "gpuhint/metrics": "systems",  # Prometheus: /metrics, /healthz, the dashboard
    "agents": "processes",  # the GPU node agent: NVML, sampling, publishing
    "gpuhint/serve": "processes",  # one process for one cluster: feed, log, hints, appliers
    "gpuhint/lab": "lab",  # traces, evaluation, analysis, replay, local services, faults
    "gpuhint/cli": "cli",
    "gpuhint": "cli",  # the package root: ``__version__`` and ``python -m gpuhint``
}
PURE_FOLDERS = (
    "gpuhint/wire",
    "models",
    "gpuhint/cores",
    "gpuhint/lab/traces",
    "gpuhint/lab/evaluation",
    "gpuhint/lab/analysis",
)


def folder_of(module: str) -> str:
    """The folder (``a/b``) that holds a module's file."""
    path = MODULES[module]
    return path.parent.relative_to(ROOT).as_posix()


def named_folder(folder: str) -> str | None:
    """The nearest folder with a rule: the folder itself or the closest one above it."""
    parts = folder.split("/")
    for n in range(len(parts), 0, -1):
        candidate = "/".join(parts[:n])
        if candidate in FLOOR_OF_FOLDER:
            return candidate
    return None


def floor_of(module: str) -> str | None:
    named = named_folder(folder_of(module))
    return FLOOR_OF_FOLDER[named] if named else None


def is_pure(module: str) -> bool:
    folder = folder_of(module)
    return any(folder == f or folder.startswith(f + "/") for f in PURE_FOLDERS)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def parse(path: Path) -> ast.Module:
    """``ast.parse`` of a file, tried again on CPython 3.11's spurious "AST constructor
    recursion depth mismatch" SystemError (python/cpython#106905: seen in this suite's
    CI, not reproducible; the same source parses on the next try)."""
    text = path.read_text(encoding="utf-8")
    for _ in range(2):
        try:
            return ast.parse(text, filename=str(path))
        except SystemError:
            continue
    return ast.parse(text, filename=str(path))


def imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module scope) for every import statement of a file."""
    tree = parse(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    # ``if TYPE_CHECKING:`` / try blocks at module scope still run (or type-check) at import
    for statement in tree.body:
        if isinstance(statement, ast.If | ast.Try):
            top_level.update(id(child) for child in ast.walk(statement))
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top_level) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:
                # ``from pkg import mod`` names the submodule when there is one
                sub = f"{name}.{alias.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    ROOT / Path(*sub.split(".")) / "__init__.py"
                ).exists()
                found.append((sub if is_module else name, id(node) in top_level))
    return found


MODULES = source_modules()


def internal(name: str) -> str | None:
    """The shipped module an import names (``from pkg import mod`` -> ``pkg.mod`` if a module)."""
    if name.split(".")[0] not in PACKAGES:
        return None
    return name


def test_every_folder_has_a_rule() -> None:
    assert len(MODULES) > 50
    unplaced = sorted({folder_of(m) for m in MODULES if floor_of(m) is None})
    assert unplaced == [], f"give these folders a floor in tests/test_layers.py: {unplaced}"
    not_folders = sorted(f for f in FLOOR_OF_FOLDER if not (ROOT / f).is_dir())
    assert not_folders == [], f"rules must name folders: {not_folders}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down(module: str) -> None:
    own = FLOORS.index(floor_of(module) or "cli")
    upward = []
    for name, _ in imports(module, MODULES[module]):
        target = internal(name)
        if target is None:
            continue
        target_floor = floor_of(target)
        assert target_floor is not None, f"{module} imports unplaced {target}"
        if FLOORS.index(target_floor) > own:
            upward.append(f"{target} ({target_floor})")
    assert upward == [], f"{module} ({FLOORS[own]}) imports upward: {upward}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if is_pure(m)))
def test_pure_floors_import_no_edge_library(module: str) -> None:
    edge = sorted(
        {
            name
            for name, _ in imports(module, MODULES[module])
            if name.split(".")[0] in EDGE_LIBRARIES
        }
    )
    assert edge == [], f"{module} ({folder_of(module)}) is pure but imports {edge}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt not in graph:
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> the shipped modules it imports, at module scope or inside a function."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for name, _ in imports(module, path):
            target = internal(name)
            if target in MODULES:
                graph[module].add(target)
    return graph


def test_no_module_cycle_even_through_lazy_imports() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_system_homes_form_no_circle() -> None:
    folders: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        home = named_folder(folder_of(module)) or ""
        folders.setdefault(home, set())
        folders[home].update(named_folder(folder_of(t)) or "" for t in targets)
    cycle = find_cycle(folders)
    assert cycle is None, "folder circle: " + " -> ".join(cycle or [])


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The parser reports an upward and an edge import, and the cycle finder a circle."""
    fake = tmp_path / "core.py"
    fake.write_text(
        "import redis\nfrom gpuhint.cli import main\n\ndef f():\n    from streams import app\n"
    )
    found = imports("gpuhint.cores.qssf", fake)
    assert ("redis", True) in found
    assert ("gpuhint.cli", True) in found
    assert ("streams.app", False) in found
    assert floor_of("gpuhint.cli.worker") == "cli"
    assert floor_of("models.simulator.engine") == "models"
    assert floor_of("gpuhint.cores.pipeline.handler") == "cores"
    assert is_pure("gpuhint.lab.evaluation.qssf") and not is_pure("gpuhint.lab.local.services")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
