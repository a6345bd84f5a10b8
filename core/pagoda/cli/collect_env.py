"""`pagoda collect-env`: what a bug report needs to know about this machine, each
platform's visible-devices variables (from its probe) included."""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import sys
from importlib import metadata
from typing import Any

from pagoda.plugins.manager import get_registries


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _pagoda_packages() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().startswith("pagoda"):
            found[name] = dist.version
    return dict(sorted(found.items()))


def collect_env() -> dict[str, Any]:
    import torch

    regs = get_registries()
    return {
        "os": f"{host.system()} {host.release()} ({host.platform()})",
        "machine": host.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "torch": {
            "version": torch.__version__,
            "debug": torch.version.debug,
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "num_threads": torch.get_num_threads(),
            "build": torch.__config__.show().strip().splitlines()[:6],
        },
        "pagoda_packages": _pagoda_packages(),
        "devices": [
            {"platform": e.spec.name, "plugin": e.plugin, "usable": e.spec.usable,
             "score": e.spec.score, "devices": list(e.spec.devices), "reason": e.spec.reason,
             "visible_devices_env": {name: os.environ.get(name)
                                     for name in e.spec.visible_devices_env}}
            for e in regs.probes
        ],
        "failed_plugins": {r.name: r.error for r in regs.failed()},
        "env": {k: v for k, v in os.environ.items() if k.startswith(("PAGODA_", "OMP_", "HF_"))},
    }


def _visible_devices(variables: dict[str, str | None]) -> str:
    """`NAME=value` (or `NAME unset`) for each variable choosing a platform's devices."""
    return ", ".join(f"{name} unset" if value is None else f"{name}={value}"
                     for name, value in variables.items()) or "(none)"


def run(args: argparse.Namespace) -> int:
    env = collect_env()
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    for key, value in env.items():
        if key == "devices":
            print("devices:")
            for probe in value:
                variables = _visible_devices(probe.pop("visible_devices_env"))
                print(f"  {probe}")
                print(f"    visible-devices variables: {variables}")
        elif isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k}: {v}")
        elif isinstance(value, list):
            print(f"{key}:")
            for item in value:
                print(f"  {item}")
        else:
            print(f"{key}: {value}")
    return 0
