"""What the commands read beside :class:`~gpuhint.wire.config.Settings`: their own
sections of the TOML file (``[slurm]``, ``[kueue]``...) and the ``GPUHINT_*`` variables
no setting reads (a typo warned about, with the closest name)."""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Any

from gpuhint.wire.config import OTHER_ENV, OTHER_ENV_PREFIXES, ConfigError, Settings


def section_values(path: Path | None, section: str) -> dict[str, Any]:
    """A command's own settings in the TOML file: the table ``[section]`` and top-level
    ``section_<name>`` keys, as ``{name: value}`` (both spellings of one name: an error).

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "g.toml"
    >>> _ = f.write_text('slurm_rate = 500\\n[slurm]\\nmin_idle = 2\\n')
    >>> section_values(f, "slurm")
    {'min_idle': 2, 'rate': 500}
    """
    if path is None:
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc}") from None
    table = data.get(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {section} must be a table ([{section}])")
    out = dict(table)
    for key, value in data.items():
        if key.startswith(section + "_"):
            name = key.removeprefix(section + "_")
            if name in out:
                raise ConfigError(f"{path}: {key} and [{section}] {name} both set; keep one")
            out[name] = value
    return out


def unknown_env(
    known: set[str], environ: dict[str, str] | None = None
) -> list[tuple[str, str | None]]:
    """``GPUHINT_*`` variables no setting reads, each with the closest known name.

    >>> unknown_env({"GPUHINT_CLUSTER"}, {"GPUHINT_CLUSTR": "x", "GPUHINT_CLUSTER": "y"})
    [('GPUHINT_CLUSTR', 'GPUHINT_CLUSTER')]
    """
    env = os.environ if environ is None else environ
    names = known | {f"GPUHINT_{f}".upper() for f in Settings.model_fields} | OTHER_ENV
    out = []
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith("GPUHINT_") or upper in names:
            continue
        if upper.startswith(OTHER_ENV_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, names, n=1, cutoff=0.75)
        out.append((name, close[0] if close else None))
    return out
