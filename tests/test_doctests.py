"""Every runnable example in a docstring (``>>>``) is run, so the docs cannot rot."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gpuhint", "models", "streams", "agents")


def modules_with_examples() -> list[str]:
    found = []
    for pkg in PACKAGES:
        root = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{pkg}."):
            spec = importlib.util.find_spec(info.name)
            origin = spec.origin if spec else None
            if origin and origin.endswith(".py") and ">>> " in Path(origin).read_text():
                found.append(info.name)
    return sorted(found)


MODULES = modules_with_examples()


def test_examples_were_found() -> None:
    assert "gpuhint.wire.contract" in MODULES and "gpuhint.cores.qssf" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
