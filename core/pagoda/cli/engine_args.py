"""Engine options shared by every command that builds an engine (bench, serve, run-batch)."""

from __future__ import annotations

import argparse
from typing import Any


def parse_bytes(text: str) -> int:
    """"4GiB", "512MB", "1e9" or a plain number of bytes."""
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    s = text.strip().lower().removesuffix("b")
    for suffix in sorted(units, key=len, reverse=True):
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * units[suffix])
    return int(float(s))


def add_engine_arguments(parser: argparse.ArgumentParser, model_positional: bool = True) -> None:
    if model_positional:
        parser.add_argument("model", nargs="?", default=None,
                            help="HF directory, .gguf file, hub id or bundled name "
                                 "(default: the embedded SmolLM2-135M-Instruct)")
    else:
        parser.add_argument("--model", default=None, help="model to load")
    g = parser.add_argument_group("engine")
    g.add_argument("--device", default=None, help="platform name or 'auto' (env PAGODA_DEVICE)")
    g.add_argument("--tokenizer", default=None, help="tokenizer path if not the model's")
    g.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    g.add_argument("--load-format", default="auto", choices=["auto", "safetensors", "gguf", "dummy"])
    g.add_argument("--quantization", default=None,
                   help="none (default: dense weights, GGUF ones dequantized) or gguf "
                        "(keep Q4_0/Q4_1 GGUF weights 4-bit; CPU)")
    g.add_argument("--max-model-len", type=int, default=None)
    g.add_argument("--max-num-seqs", type=int, default=256)
    g.add_argument("--max-num-batched-tokens", type=int, default=2048)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--kv-cache-memory", type=parse_bytes, default=None,
                   help="KV cache size in bytes (e.g. 2GiB); default: a fraction of free memory")
    g.add_argument("--memory-fraction", type=float, default=None,
                   help="fraction of free device memory for the KV cache "
                        "(default: the platform's choice)")
    g.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="fraction of the device's total memory this engine may fill (weights, "
                        "activations, KV cache); default: the platform's (0.9 on GPUs)")
    g.add_argument("--enforce-eager", action="store_true",
                   help="launch every kernel from Python; no device graphs for decode steps")
    g.add_argument("--graph-batch-sizes", type=_int_list, default=None,
                   help="decode batch sizes to capture as device graphs, e.g. 1,2,4,8,16 "
                        "(default: 1, 2, 4, 8, ... up to --max-num-seqs)")
    g.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="schedule step N+1 while the device runs step N (default: where the "
                        "device runs asynchronously from the host)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--scheduling-policy", default="fcfs", choices=["fcfs", "priority"])
    g.add_argument("--attention-backend", default=None, help="force an attention backend")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--generation-config", default="auto", choices=["auto", "pagoda"])
    g.add_argument("--chat-template", default=None, help="a Jinja chat template or a file")


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """LLM(...) keyword arguments from parsed engine options."""
    template = args.chat_template
    if template and not any(c in template for c in "{}") and _is_file(template):
        with open(template) as f:
            template = f.read()
    return {
        "model": args.model, "tokenizer": args.tokenizer, "device": args.device,
        "dtype": args.dtype, "load_format": args.load_format, "max_model_len": args.max_model_len,
        "max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
        "block_size": args.block_size, "kv_cache_memory": args.kv_cache_memory,
        "memory_fraction": args.memory_fraction,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "enforce_eager": args.enforce_eager, "graph_batch_sizes": args.graph_batch_sizes,
        "async_scheduling": args.async_scheduling,
        "enable_prefix_caching": args.enable_prefix_caching,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "scheduling_policy": args.scheduling_policy,
        "attention_backend": args.attention_backend, "seed": args.seed,
        "generation_config": args.generation_config, "chat_template": template,
        "quantization": args.quantization,
    }


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}") from None


def _is_file(path: str) -> bool:
    import os

    return os.path.isfile(path)
