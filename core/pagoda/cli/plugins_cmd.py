"""`pagoda plugins`: the first-party backends and how each stands here, then every
installed plugin, its status and what it registered; with --model or --architecture,
which implementation would run that model (Pagoda's own class or the transformers
fallback) instead."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from pagoda.plugins.first_party import first_party_status
from pagoda.plugins.manager import PluginRecord, PluginRegistries, get_registries

UNKNOWN = "unknown"


MODEL_IMPLS = ("auto", "pagoda", "transformers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", help="say which implementation runs this model (HF "
                       "directory, .gguf file, hub id or bundled name) with each model_impl")
    which.add_argument("--architecture", help="the same for an HF architecture name, e.g. "
                       "GPTNeoXForCausalLM")


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


def model_report(hf_config: Any) -> dict[str, Any]:
    """{"architectures": [...], and per model_impl (auto, pagoda, transformers) either
    {"runs": what runs it} or {"error": why nothing can}}. The fallback's probe of the
    built model (at load) can still refuse it."""
    from pagoda.models.hf_fallback import config_architectures
    from pagoda.models.loader import choose_model_impl

    report: dict[str, Any] = {"architectures": config_architectures(hf_config)}
    for impl in MODEL_IMPLS:
        try:
            report[impl] = {"runs": choose_model_impl(hf_config, impl).describe()}
        except ValueError as exc:
            report[impl] = {"error": str(exc)}
    return report


def _model_config(args: argparse.Namespace) -> tuple[str, Any]:
    if args.model is not None:
        from pagoda.model_source import resolve_model

        return args.model, resolve_model(args.model).hf_config()
    from transformers import PretrainedConfig

    return args.architecture, PretrainedConfig(architectures=[args.architecture])


def _run_model(args: argparse.Namespace) -> int:
    name, hf_config = _model_config(args)
    report = model_report(hf_config)
    if args.json:
        print(json.dumps({"model": name, **report}, indent=2))
    else:
        print(f"{name} ({', '.join(report['architectures']) or 'no architecture'}):")
        for impl in MODEL_IMPLS:
            print(f"  model_impl {impl + ':':<13} "
                  f"{report[impl].get('runs') or 'cannot run: ' + report[impl]['error']}")
    return 0 if "runs" in report["auto"] else 1


def run(args: argparse.Namespace) -> int:
    if args.model is not None or args.architecture is not None:
        return _run_model(args)
    report = plugins_report(get_registries())
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    _print_backends(report["backends"])
    print("\nPlugins:")
    for plugin in report["plugins"]:
        _print_plugin(plugin)
    return 0
