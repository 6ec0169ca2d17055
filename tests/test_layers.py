"""Imports flow one way: contract -> models -> cores -> drivers -> adapters -> CLI.

Every module of the shipped packages (``gpuhint``, ``models``, ``streams``, ``agents``) is
parsed (``ast``, nothing is imported) and given a layer; each import, at module scope or
inside a function, may only name a module of the same or a lower layer. The pure layers
(everything below the adapters) import no Kafka, Faust, Redis, NVML or Kubernetes
library. The module-scope import graph has no cycle (lazy imports inside a function may
close one, e.g. ``gpuhint.traces`` dispatching to ``gpuhint.traces_sacct``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gpuhint", "models", "streams", "agents")
LAYERS = ("contract", "models", "cores", "drivers", "adapters", "cli")
PURE = frozenset(LAYERS[:4])
EDGE_LIBRARIES = frozenset({"faust", "mode", "kafka", "aiokafka", "redis", "pynvml", "kubernetes"})

# Longest matching prefix wins (a module ``a.b.c`` matches ``a.b.c``, then ``a.b``, then ``a``).
LAYER_OF: dict[str, str] = {
    # wire contract, configuration, key/topic names, sink interface
    "gpuhint": "contract",
    "gpuhint.contract": "contract",
    "gpuhint.config": "contract",
    "gpuhint.keys": "contract",
    "gpuhint.topics": "contract",
    "gpuhint.logs": "contract",
    "gpuhint.freshness": "contract",  # the appliers' liveness log (logging only)
    "gpuhint.store": "contract",
    # duration models, forecaster, power policy; trace readers (pure input parsing)
    "models": "models",
    "gpuhint.traces": "models",
    "gpuhint.traces_sacct": "models",
    "gpuhint.loadseries": "models",
    "gpuhint.slurm.fields": "models",
    # pure cores: QSSF engine, CES engine, the message path, the scheduler simulator
    "gpuhint.core": "cores",
    "gpuhint.ces_core": "cores",
    "models.simulator": "cores",
    "models.fifo_guard": "cores",  # the simulator-backed queue-order guard of gpuhint.core
    "streams": "cores",
    "streams.handler": "cores",
    "streams.cluster_load": "cores",
    "streams.dead_letter": "cores",
    "streams.state_table": "cores",
    "streams.partitioning": "cores",
    "streams.placement": "cores",
    # offline drivers of the cores (still pure)
    "streams.inprocess": "drivers",
    "gpuhint.evaluation": "drivers",
    "gpuhint.analysis": "drivers",
    # adapters: Kafka, Faust, Redis, NVML, Slurm, Kubernetes, metrics, test services
    "gpuhint.kafka_io": "adapters",
    "gpuhint.client": "adapters",
    "gpuhint.slurm": "adapters",
    "gpuhint.kueue": "adapters",
    "gpuhint.metrics": "adapters",
    "gpuhint.testing": "adapters",
    "streams.app": "adapters",
    "streams.batching": "adapters",  # Faust stream batching
    "streams.faust_consumer": "adapters",  # Faust's consumer, leaner
    "streams.faust_io": "adapters",  # the Faust app, topics, tables, the routine's edge
    "streams.faust_assignor": "adapters",  # Faust's assignor, by load
    "streams.redis_store": "adapters",
    "agents": "adapters",
    # command line
    "gpuhint.cli": "cli",
    "gpuhint.__main__": "cli",
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        layer = LAYER_OF.get(".".join(parts[:n]))
        if layer is not None:
            return layer
    return None


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


def imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module scope) for every import statement of a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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


def test_every_module_has_a_layer() -> None:
    assert len(MODULES) > 50
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert unplaced == [], f"give these modules a layer in tests/test_layers.py: {unplaced}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down(module: str) -> None:
    own = LAYERS.index(layer_of(module) or "cli")
    upward = []
    for name, _ in imports(module, MODULES[module]):
        target = internal(name)
        if target is None:
            continue
        target_layer = layer_of(target)
        assert target_layer is not None, f"{module} imports unplaced {target}"
        if LAYERS.index(target_layer) > own:
            upward.append(f"{target} ({target_layer})")
    assert upward == [], f"{module} ({LAYERS[own]}) imports upward: {upward}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer_of(m) in PURE))
def test_pure_layers_import_no_edge_library(module: str) -> None:
    edge = sorted(
        {
            name
            for name, _ in imports(module, MODULES[module])
            if name.split(".")[0] in EDGE_LIBRARIES
        }
    )
    assert edge == [], f"{module} ({layer_of(module)}) is pure but imports {edge}"


def test_module_scope_imports_have_no_cycle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for name, at_top in imports(module, path):
            target = internal(name)
            if not at_top or target is None:
                continue
            graph[module].add(target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt]
                pytest.fail("module-scope import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The parser reports an upward and an edge import (so the tests above can fail)."""
    fake = tmp_path / "core.py"
    fake.write_text(
        "import redis\nfrom gpuhint.cli import main\n\ndef f():\n    from streams import app\n"
    )
    found = imports("gpuhint.core", fake)
    assert ("redis", True) in found
    assert ("gpuhint.cli", True) in found
    assert ("streams.app", False) in found
    assert layer_of("gpuhint.cli.worker") == "cli"
    assert layer_of("models.simulator.engine") == "cores"
    assert layer_of("models.base") == "models"
