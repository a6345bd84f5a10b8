"""`pagoda bench throughput|latency`: one workload, one or more backends, side by side."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from statistics import fmean
from typing import TYPE_CHECKING, Any

from pagoda.bench.config import LatencyConfig, OfflineBenchConfig, ThroughputConfig
from pagoda.bench.dataset import BenchRequest, random_requests
from pagoda.bench.memory import mib, peak_resident_bytes
from pagoda.bench.stats import summarize
from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda.cli.engine_args import add_engine_arguments, engine_config
from pagoda.config.fields import flat_values

if TYPE_CHECKING:
    from pagoda.bench.backends import RunResult
    from pagoda.config import EngineConfig

_BENCHMARKS: dict[str, tuple[type[OfflineBenchConfig], str]] = {
    "throughput": (ThroughputConfig, "offline throughput of a batch of random prompts"),
    "latency": (LatencyConfig, "latency of one batch, repeated"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    for name, (config, help) in _BENCHMARKS.items():
        bench = sub.add_parser(name, help=help, description=help)
        add_engine_arguments(bench)
        add_dataclass_arguments(bench, config)
    _add_plugin_benchmarks(sub)


def _add_plugin_benchmarks(sub: Any) -> None:
    """Benchmarks other plugins register as CLI subcommands named "bench NAME"."""
    from pagoda.plugins.lazy import load_target
    from pagoda.plugins.manager import get_registries

    for entry in get_registries().cli_commands:
        parent, _, name = entry.spec.name.partition(" ")
        if parent != "bench" or not name or name in sub.choices:
            continue
        try:
            add_arguments = load_target(entry.spec.add_arguments)
        except Exception:
            logging.getLogger(__name__).exception(
                "benchmark %r of plugin %r cannot be loaded; skipped", name, entry.plugin)
            continue
        extra = sub.add_parser(name, help=entry.spec.help, description=entry.spec.help)
        add_arguments(extra)
        extra.set_defaults(_run=entry.spec.run)


def _backends(engine: EngineConfig, bench: OfflineBenchConfig) -> list[Any]:
    from pagoda.bench.backends import BACKENDS  # torch and transformers: only when running

    names = [n.strip() for n in bench.backend.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise SystemExit(f"--backend: unknown {unknown}; choose from {sorted(BACKENDS)}")
    return [BACKENDS[n](engine, bench) for n in names]


def _workload(bench: OfflineBenchConfig, backend: Any, count: int, seed: int,
              output_len: int | None = None) -> list[BenchRequest]:
    special = getattr(backend, "special_token_ids", frozenset({0, 1, 2}))
    return random_requests(count, bench.input_len, output_len or bench.output_len,
                           backend.vocab_size, bench.range_ratio, seed, special)


def _throughput_report(result: RunResult) -> dict[str, Any]:
    total = result.prompt_tokens + result.output_tokens
    return {
        "elapsed_s": result.elapsed,
        "num_requests": result.num_requests,
        "prompt_tokens": result.prompt_tokens,
        "output_tokens": result.output_tokens,
        "requests_per_s": result.num_requests / result.elapsed,
        "total_tokens_per_s": total / result.elapsed,
        "output_tokens_per_s": result.output_tokens / result.elapsed,
        "request_latency_s": summarize(result.request_latencies),
        "ttft_s": summarize(result.ttfts),
    }


def _print_throughput(name: str, description: str, report: dict[str, Any]) -> None:
    print(f"== {name}: {description} ==")
    print(f"Throughput: {report['requests_per_s']:.2f} requests/s, "
          f"{report['total_tokens_per_s']:.2f} total tokens/s, "
          f"{report['output_tokens_per_s']:.2f} output tokens/s")
    lat = report["request_latency_s"]
    if lat:
        print(f"Request latency (s): mean {lat['mean']:.3f}, p50 {lat['p50']:.3f}, "
              f"p90 {lat['p90']:.3f}, p99 {lat['p99']:.3f}")


def _run_throughput(bench: ThroughputConfig, seed: int, backends: list[Any]) -> dict[str, Any]:
    results = {}
    requests = _workload(bench, backends[0], bench.num_prompts, seed)
    warmup = (bench.num_prompts if bench.num_warmup_prompts is None
              else bench.num_warmup_prompts)
    warm = _workload(bench, backends[0], warmup, seed + 1) if warmup else []
    for backend in backends:
        if warm:
            backend.run(warm)
        report = _throughput_report(backend.run(requests))
        report["description"] = backend.description
        _print_throughput(backend.name, backend.description, report)
        report["peak_resident_bytes"] = _print_peak_memory(len(backends))
        results[backend.name] = report
    return results


def _latencies(bench: LatencyConfig, seed: int, backend: Any,
               output_len: int | None = None) -> list[RunResult]:
    return [backend.run(_workload(bench, backend, bench.batch_size, seed + i, output_len))
            for i in range(bench.num_iters)]


def _first_token(bench: LatencyConfig, seed: int, backend: Any, runs: list[RunResult],
                 whole_mean: float) -> tuple[float, float]:
    """(time to the first token, time per output token after it) of the timed `runs`,
    whose mean latency is `whole_mean`.

    Where the backend timestamps each request's first and last token (Pagoda), both come
    from them, request by request. Otherwise (HF) the same prompts run again with one output
    token, warmed up like the whole runs, and the time per token is the difference of the
    means spread over the other tokens (Pagoda's one-token runs on the H200 were not
    trustworthy: docs/benchmarks.md, session 12)."""
    later = bench.output_len - 1
    if all(len(r.ttfts) == len(r.request_latencies) == bench.batch_size for r in runs):
        ttfts = [t for r in runs for t in r.ttfts]
        lasts = [lat for r in runs for lat in r.request_latencies]
        return fmean(ttfts), (fmean(lasts) - fmean(ttfts)) / later
    for i in range(bench.num_iters_warmup):
        backend.run(_workload(bench, backend, bench.batch_size, seed + 2000 + i, 1))
    first = fmean(r.elapsed for r in _latencies(bench, seed, backend, 1))
    return first, (whole_mean - first) / later


def _run_latency(bench: LatencyConfig, seed: int, backends: list[Any]) -> dict[str, Any]:
    """Each backend: the batch's latency, repeated, and its time to the first token and per
    output token after it (`_first_token`)."""
    results = {}
    for backend in backends:
        for i in range(bench.num_iters_warmup):
            backend.run(_workload(bench, backend, bench.batch_size, seed + 1000 + i))
        runs = _latencies(bench, seed, backend)
        whole = summarize([r.elapsed for r in runs])
        report = {"description": backend.description, "latency_s": whole,
                  "batch_size": bench.batch_size, "input_len": bench.input_len,
                  "output_len": bench.output_len}
        print(f"== {backend.name}: {backend.description} ==")
        print(f"Avg latency: {whole['mean']:.4f} s (batch {bench.batch_size}, "
              f"{bench.input_len} in, {bench.output_len} out); p50 {whole['p50']:.4f}, "
              f"p90 {whole['p90']:.4f}, p99 {whole['p99']:.4f}")
        if bench.output_len > 1:
            first, tpot = _first_token(bench, seed, backend, runs, whole["mean"])
            report.update(first_token_latency_s=first, time_per_output_token_s=tpot)
            print(f"First token: {first * 1e3:.2f} ms; time per output token after it: "
                  f"{tpot * 1e3:.3f} ms")
        report["peak_resident_bytes"] = _print_peak_memory(len(backends))
        results[backend.name] = report
    return results


def _print_peak_memory(num_backends: int) -> int | None:
    """Print and return this process's peak resident memory so far: the engine (its core,
    and its worker where the executor runs one in process) and the benchmark around it."""
    peak = peak_resident_bytes()
    shared = (f"; the {num_backends} backends' engines all live in this process"
              if num_backends > 1 else "")
    print(f"Peak resident memory: {mib(peak)} (this process{shared})")
    return peak


def _ratios(results: dict[str, Any], key: str, higher_is_better: bool) -> dict[str, float]:
    if "pagoda" not in results or len(results) < 2:
        return {}
    ours = results["pagoda"]
    out = {}
    for name, other in results.items():
        if name == "pagoda":
            continue
        a, b = _metric(ours, key), _metric(other, key)
        out[f"pagoda/{name}"] = a / b if higher_is_better else b / a
    return out


def _metric(report: dict[str, Any], key: str) -> float:
    value: Any = report
    for part in key.split("."):
        value = value[part]
    return float(value)


def run(args: argparse.Namespace) -> int:
    engine = engine_config(args)
    bench = dataclass_from_args(_BENCHMARKS[args.bench][0], args)
    backends = _backends(engine, bench)
    seed = engine.model.seed  # the workload's too
    if isinstance(bench, ThroughputConfig):
        results = _run_throughput(bench, seed, backends)
        ratios = _ratios(results, "output_tokens_per_s", higher_is_better=True)
    else:
        results = _run_latency(bench, seed, backends)
        ratios = _ratios(results, "latency_s.mean", higher_is_better=False)
    for name, ratio in ratios.items():
        print(f"Speed-up {name}: {ratio:.2f}x")
    if bench.output_json:
        options = {**flat_values(engine), **dataclasses.asdict(bench)}
        with open(bench.output_json, "w") as f:
            json.dump({"benchmark": args.bench, "args": options, "results": results,
                       "speedup": ratios}, f, indent=2, default=str)
    return 0
