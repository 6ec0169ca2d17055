"""The user-facing docs name only what exists: settings and their defaults, flags, env
vars and repository paths (README.md, docs/configuration.md and the reference pages)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

import gpuhint.kueue.settings as kueue_settings
import gpuhint.slurm.settings as slurm_settings
from gpuhint.cli import build_parser
from gpuhint.wire.config import OTHER_ENV, OTHER_ENV_PREFIXES, Settings

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    "README.md",
    "docs/configuration.md",
    "docs/operations.md",
    "docs/redis-keys.md",
    "docs/metrics.md",
    "docs/agent.md",
    "docs/models.md",
    "docs/architecture.md",
)
COMMAND_PAGES = (*PAGES, "docs/qssf.md", "docs/ces.md")  # their "how to reproduce" commands
REPO_DIRS = ("gpuhint/", "models/", "streams/", "agents/", "tests/", "bench/", "scripts/")
PLACEHOLDER_ENV = {"GPUHINT_X", "GPUHINT_CLUSTR", "GPUHINT_SLURM", "GPUHINT_KUEUE"}


def _config_rows() -> dict[str, str]:
    """``{setting: default as written}`` from the table of docs/configuration.md."""
    rows: dict[str, str] = {}
    for line in (ROOT / "docs/configuration.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`([a-z0-9_]+)`", cells[0])
        defaults = re.findall(r"`([^`]+)`", cells[1]) or [cells[1]]
        for i, name in enumerate(names):
            rows[name] = defaults[min(i, len(defaults) - 1)]
    return rows


def _same_default(written: str, value: Any) -> bool:
    if value is None:
        return written in ("unset", "none", "none (off)", "short host name")
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return written == str(value).lower()
    if isinstance(value, (int, float)):
        try:
            return float(written) == float(value)
        except ValueError:
            return False
    return written == str(value)


def test_configuration_table_lists_every_setting_with_its_default() -> None:
    rows = _config_rows()
    lines = (ROOT / "docs/configuration.md").read_text().splitlines()
    fields = Settings.model_fields
    assert sorted(set(rows) - set(fields)) == [], "documented but not a setting"
    # the Kafka security fields share the kafka_security_protocol row; others have their own
    shared = next(ln for ln in lines if ln.startswith("| `kafka_security_protocol` |"))
    missing = [f for f in fields if f not in rows and f"`{f}`" not in shared]
    assert missing == [], "settings docs/configuration.md does not name"
    wrong = {n: (d, fields[n].default) for n, d in rows.items()}
    wrong = {n: dv for n, dv in wrong.items() if not _same_default(*dv)}
    assert wrong == {}, "documented default differs from the code's"


def _known_env() -> set[str]:
    known = {f"GPUHINT_{f}".upper() for f in Settings.model_fields} | set(OTHER_ENV)
    for module in (slurm_settings, kueue_settings):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, BaseSettings) and obj is not BaseSettings:
                prefix = str(obj.model_config.get("env_prefix", ""))
                known |= {(prefix + f).upper() for f in obj.model_fields}
    return known | PLACEHOLDER_ENV


@pytest.mark.parametrize("page", PAGES)
def test_every_documented_env_var_is_read(page: str) -> None:
    known = _known_env()
    names = set(re.findall(r"GPUHINT_[A-Z0-9_]*[A-Z0-9]", (ROOT / page).read_text()))
    unknown = sorted(n for n in names - known if not n.startswith(OTHER_ENV_PREFIXES))
    assert unknown == [], f"{page}: no setting reads these"


def _snippets(text: str) -> list[str]:
    """Lines of fenced code blocks (continuations joined) and inline code spans."""
    out: list[str] = []
    for i, part in enumerate(re.split(r"^```.*$", text, flags=re.M)):
        if i % 2:
            out += part.replace("\\\n", " ").splitlines()
        else:
            out += re.findall(r"`([^`\n]+)`", part)
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _bad_flags(snippet: str, root: argparse.ArgumentParser) -> list[str]:
    bad = []
    for m in re.finditer(r"(?<![\w/.-])gpuhint((?:\s+[a-z][a-z0-9-]*)*)", snippet):
        parser, words = root, list[str]()
        for word in m.group(1).split():
            sub = _subparsers(parser)
            if word not in sub:
                break
            parser, words = sub[word], [*words, word]
        if not words:
            continue
        rest = re.split(r"[|;#]|&&", snippet[m.end() :])[0]
        options = {o for a in parser._actions for o in a.option_strings}
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
            if flag not in options:
                bad.append(f"gpuhint {' '.join(words)} {flag}")
    return bad


@pytest.mark.parametrize("page", COMMAND_PAGES)
def test_every_documented_gpuhint_flag_exists(page: str) -> None:
    root = build_parser()
    bad = [b for s in _snippets((ROOT / page).read_text()) for b in _bad_flags(s, root)]
    assert bad == [], f"{page}: flags the commands do not have"


@pytest.mark.parametrize("page", PAGES)
def test_every_documented_repository_path_exists(page: str) -> None:
    missing = []
    for span in re.findall(r"`([^`\s]+)`", (ROOT / page).read_text()):
        path = span.rstrip(".,:;)")
        repo_path = path.startswith(REPO_DIRS) and re.fullmatch(r"[\w./-]+", path)
        if repo_path and not (ROOT / path).exists():
            missing.append(path)
    assert missing == [], f"{page}: paths that do not exist"


def _leaves(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str]]:
    subs = _subparsers(parser)
    if not subs:
        return [(path, parser.format_help())]
    return [leaf for name, sub in subs.items() for leaf in _leaves(sub, f"{path} {name}")]


def test_every_command_help_has_examples() -> None:
    """README: "Every command has `--help` with examples"."""
    leaves = _leaves(build_parser(), "gpuhint")
    assert len(leaves) > 10
    without = [path for path, text in leaves if "example" not in text]
    assert without == []
