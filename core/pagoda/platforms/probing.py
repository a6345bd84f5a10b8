"""Helpers for a platform's probe: cheap answers read from files, without importing torch,
a vendor SDK or opening a device (see `pagoda_platform_probe`)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from pagoda.plugins.specs import PlatformProbe

Device = TypeVar("Device")


def installed_torch_dir() -> Path | None:
    """The installed torch package's folder, found without importing it; None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def torch_build_problem(build: str, problem: str, torch_dir: Path | None = None) -> str | None:
    """Why the installed torch is not a `build` build, read from torch/version.py without
    importing torch (a build for a device sets "cuda", "hip" or "xpu" there to a string,
    other builds to None): "torch is not installed", f"torch {version} {problem}", or None
    when it is, or when version.py cannot be read (the platform finds out when it starts).
    `torch_dir` is torch's folder (default: the installed one)."""
    root = torch_dir or installed_torch_dir()
    if root is None:
        return "torch is not installed"
    try:
        text = (root / "version.py").read_text()
    except OSError:
        return None
    if re.search(rf"^{re.escape(build)}\b[^=\n]*=\s*['\"]", text, re.M):
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    return f"torch {version.group(1) if version else '(unknown version)'} {problem}"


def missing_module(module: str, install: str, *, what: str = "") -> str | None:
    """f"{module} ({what}) is not installed: {install}" when `module` cannot be found (it is
    not imported; a dotted name imports its parent packages), else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    if found:
        return None
    return f"{module}{f' ({what})' if what else ''} is not installed: {install}"


def read_attribute(path: Path) -> str:
    """The text of a sysfs attribute (or any small file), stripped; "" when unreadable."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def visible_devices(devices: list[Device], variable: str,
                    select: Callable[[list[Device], str | None], list[Device]], what: str,
                    environ: Mapping[str, str] | None = None) -> tuple[list[Device], str | None]:
    """The `devices` that `select` leaves for the value of the environment variable
    `variable` (None when unset), or none and why: f"{variable}={value!r} hides all
    {len(devices)} {what}". `environ` defaults to the process's environment."""
    value = (os.environ if environ is None else environ).get(variable)
    shown = select(devices, value)
    if not shown:
        return [], f"{variable}={value!r} hides all {len(devices)} {what}"
    return shown, None


def platform_probe(name: str, devices: Iterable[str], problems: Iterable[str | None], *,
                   score: int, visible_devices_env: tuple[str, ...] = ()) -> PlatformProbe:
    """The probe of platform `name`: usable with `score` when none of `problems` is set, else
    unusable with them joined as its reason; `devices` are listed either way."""
    reasons = [p for p in problems if p]
    return PlatformProbe(name, usable=not reasons, score=0 if reasons else score,
                         devices=tuple(devices), reason="; ".join(reasons) or None,
                         visible_devices_env=visible_devices_env)
