"""`pagoda plugins`: every plugin, its status and what it registered."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pagoda.plugins.manager import PluginRegistries, get_registries


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def plugins_report(regs: PluginRegistries) -> list[dict[str, Any]]:
    """One dict per plugin: identity, status, and what it registered."""
    report = []
    for rec in regs.plugins:
        def mine(registry: Any, rec_name: str = rec.name) -> list[Any]:
            return [e for e in registry if e.plugin == rec_name]

        kernels: dict[str, list[str]] = {}
        for e in mine(regs.kernels):
            kernels.setdefault(e.spec.op, []).append(e.spec.name)
        report.append({
            "name": rec.name,
            "distribution": rec.distribution,
            "version": rec.version,
            "api_version": rec.api_version,
            "status": rec.status,
            "error": rec.error,
            "traceback": rec.traceback,
            "devices": [
                {"name": e.spec.name, "usable": e.spec.usable, "score": e.spec.score,
                 "devices": list(e.spec.devices), "reason": e.spec.reason}
                for e in mine(regs.probes)
            ],
            "attention_backends": [e.spec.name for e in mine(regs.attention_backends)],
            "quant_methods": [e.spec.name for e in mine(regs.quant_methods)],
            "executors": [e.spec.name for e in mine(regs.executors)],
            "kernel_providers": kernels,
            "model_architectures": [e.spec.architecture for e in mine(regs.models)],
            "cli_subcommands": [e.spec.name for e in mine(regs.cli_commands)],
        })
    return report


def _print_text(report: list[dict[str, Any]]) -> None:
    for p in report:
        api = p["api_version"] if p["api_version"] is not None else "?"
        print(f"{p['name']}  ({p['distribution']} {p['version']}, plugin API {api})  "
              f"[{p['status']}]")
        if p["error"]:
            print(f"  error: {p['error']}")
        if p["traceback"]:
            print("  " + p["traceback"].rstrip().replace("\n", "\n  "))
        for d in p["devices"]:
            state = f"usable, score {d['score']}" if d["usable"] else f"unusable: {d['reason']}"
            found = f" — {', '.join(d['devices'])}" if d["devices"] else ""
            print(f"  device {d['name']}: {state}{found}")
        for key, label in (("attention_backends", "attention backends"),
                           ("quant_methods", "quant methods"),
                           ("executors", "executors"),
                           ("model_architectures", "models"),
                           ("cli_subcommands", "CLI")):
            if p[key]:
                print(f"  {label}: {', '.join(p[key])}")
        if p["kernel_providers"]:
            ops = ", ".join(f"{op} ({'/'.join(names)})"
                            for op, names in sorted(p["kernel_providers"].items()))
            print(f"  kernels: {ops}")


def run(args: argparse.Namespace) -> int:
    report = plugins_report(get_registries())
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_text(report)
    return 0
