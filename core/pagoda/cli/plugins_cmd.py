"""`pagoda plugins`: the first-party backends and how each stands here, then every
installed plugin, its status and what it registered."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from pagoda.plugins.first_party import first_party_status
from pagoda.plugins.manager import PluginRecord, PluginRegistries, get_registries

UNKNOWN = "unknown"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _plugin_entry(rec: PluginRecord, regs: PluginRegistries) -> dict[str, Any]:
    def mine(registry: Any) -> list[Any]:
        return [e for e in registry if e.plugin == rec.name]

    kernels: dict[str, list[str]] = {}
    for e in mine(regs.kernels):
        kernels.setdefault(e.spec.op, []).append(e.spec.name)
    return {
        "name": rec.name,
        "distribution": rec.distribution,
        "version": rec.version,
        "api_version": rec.api_version,
        "status": rec.status,
        "verified_on": rec.verified_on,
        "deprecation": rec.deprecation,
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
    }


def plugins_report(regs: PluginRegistries) -> dict[str, list[dict[str, Any]]]:
    """{"backends": how each first-party backend stands here, "plugins": one dict per
    plugin (identity, status, what it registered)}. Unknown `verified_on` is None."""
    return {
        "backends": [asdict(s) | {"devices": list(s.devices)} for s in first_party_status(regs)],
        "plugins": [_plugin_entry(rec, regs) for rec in regs.plugins],
    }


def _print_backends(backends: list[dict[str, Any]]) -> None:
    print("First-party backends:")
    for b in backends:
        package = f"{b['distribution']} {b['version'] or ''}".rstrip()
        if b["status"] == "usable":
            state = f"usable: {', '.join(b['devices'])}"
        else:
            state = f"{b['status']}: {b['reason']}"
        line = f"  {b['name']:<6} {package:<20} {state}"
        if b["status"] != "not installed":
            line += f" (verified on: {b['verified_on'] or UNKNOWN})"
        print(line)


def _print_plugin(p: dict[str, Any]) -> None:
    api = p["api_version"] if p["api_version"] is not None else "?"
    print(f"{p['name']}  ({p['distribution']} {p['version']}, plugin API {api})  "
          f"[{p['status']}]")
    if p["error"]:
        print(f"  error: {p['error']}")
    if p["traceback"]:
        print("  " + p["traceback"].rstrip().replace("\n", "\n  "))
    if p["status"] == "loaded":
        print(f"  verified on: {p['verified_on'] or UNKNOWN}")
    if p["deprecation"]:
        print(f"  deprecated: {p['deprecation']}")
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
        return 0
    _print_backends(report["backends"])
    print("\nPlugins:")
    for plugin in report["plugins"]:
        _print_plugin(plugin)
    return 0
