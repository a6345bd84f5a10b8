"""Real entry-point discovery for tests: fake plugin distributions written to a directory
put on PYTHONPATH, and the `pagoda` CLI run in a subprocess of this interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PAGODA_ENV = ("PAGODA_PLUGINS", "PAGODA_DEVICE")


def write_plugin_distribution(
    root: Path,
    entry_point: str,
    source: str,
    *,
    distribution: str | None = None,
    version: str = "1.0",
    modules: dict[str, str] | None = None,
    attribute: str | None = None,
) -> str:
    """Write an installed-looking distribution into `root` (put on PYTHONPATH): a
    NAME-VER.dist-info with METADATA and an entry point in group `pagoda.plugins` that
    names module `fake_pagoda_<entry_point>` (written from `source`), or that module's
    `attribute`, plus extra modules. Returns the distribution name."""
    distribution = distribution or f"pagoda-fake-{entry_point}"
    module = f"fake_pagoda_{entry_point}"
    info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")
    target = f"{module}:{attribute}" if attribute else module
    (info / "entry_points.txt").write_text(f"[pagoda.plugins]\n{entry_point} = {target}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    for name, text in (modules or {}).items():
        (root / f"{name}.py").write_text(textwrap.dedent(text))
    return distribution


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def clean_env(pythonpath: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PAGODA_ENV and k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra)
    return env


def run_python(args: list[str], pythonpath: Path | None = None, cwd: Path | None = None,
               **env: str) -> CliResult:
    """Run this interpreter (the venv's) with `args` in a clean environment."""
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120,
        env=clean_env(pythonpath, **env), cwd=cwd or pythonpath or Path(__file__).parent,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def run_pagoda(*args: str, pythonpath: Path | None = None, **env: str) -> CliResult:
    """Run `pagoda ARGS` as `python -m pagoda.cli.main ARGS`."""
    return run_python(["-m", "pagoda.cli.main", *args], pythonpath, **env)


def by_name(report: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report}
