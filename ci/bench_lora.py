"""LoRA serving throughput: workload A (prompts of 128 random tokens, 128 output tokens,
ignore_eos) with rank-16 adapters spread over the requests (request i runs adapter
i % adapters), beside the same run without LoRA; each run in a process of its own, with
dummy bf16 weights. The adapters are random weights of the model's shapes, written as
PEFT writes them (no peft needed).

    python ci/bench_lora.py MODEL_DIR OUT.json [--device cuda] [--num-prompts 1000]
        [--adapters 8] [--rank 16]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENGINE = {"load_format": "dummy", "dtype": "bfloat16", "max_num_seqs": 1024,
          "max_num_batched_tokens": 8192}
"""As workload A's throughput run (ci/gpu_bench.py)."""


def make_adapters(model: Path, root: Path, count: int, rank: int) -> list[Path]:
    """`count` random adapters of every attention and MLP projection of every layer."""
    import torch
    from transformers import AutoConfig

    from pagoda.testing.lora_adapter import write_random_adapter

    config = AutoConfig.from_pretrained(model)
    return [write_random_adapter(config, root / f"adapter{i}", rank=rank, seed=i,
                                 dtype=torch.bfloat16) for i in range(count)]


def one_run(args: argparse.Namespace) -> dict:
    """This process's run: with the adapters in args.adapter_dirs, or none."""
    from pagoda import LLM, LoRARequest, SamplingParams

    adapters = [LoRARequest(f"adapter{i}", i + 1, path)
                for i, path in enumerate(args.adapter_dirs)]
    lora = {"enable_lora": True, "max_loras": len(adapters),
            "max_lora_rank": args.rank} if adapters else {}
    llm = LLM(args.model, device=args.device, **ENGINE, **lora)
    vocab = llm.engine.hf_config.vocab_size
    rng = random.Random(0)
    warmup, prompts = ([{"prompt_token_ids": [rng.randrange(10, vocab - 10) for _ in range(128)]}
                        for _ in range(args.num_prompts)] for _ in range(2))
    per_request = [adapters[i % len(adapters)] if adapters else None
                   for i in range(args.num_prompts)]
    params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True,
                            detokenize=False)
    # Warm-up: the same workload with other prompts, so that the timed run compiles
    # nothing (as `pagoda bench throughput` warms up)
    llm.generate(warmup, params, use_tqdm=False, lora_request=per_request)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False, lora_request=per_request)
    elapsed = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"adapters": len(adapters), "elapsed_s": elapsed, "output_tokens": tokens,
            "output_tokens_per_s": tokens / elapsed, "info": {
                k: llm.engine.core.info.get(k) for k in ("device", "attention_backend")}
            | {"lora_ops": {op: llm.engine.core.info["ops"].get(op)
                            for op in ("lora_shrink", "lora_expand")}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("output_json")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--adapter-dirs", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.adapter_dirs is not None:  # one run, in a process of its own
        Path(args.output_json).write_text(json.dumps(one_run(args)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_adapters(Path(args.model), Path(tmp), args.adapters, args.rank)
        for name, dirs in (("lora", paths), ("base", [])):
            out = Path(tmp) / f"{name}.json"
            subprocess.run([sys.executable, __file__, args.model, str(out), "--device",
                            args.device, "--num-prompts", str(args.num_prompts), "--rank",
                            str(args.rank), "--adapter-dirs", *map(str, dirs)], check=True)
            results[name] = json.loads(out.read_text())
            print(f"{name}: {results[name]['output_tokens_per_s']:.0f} output tok/s", flush=True)
    results["lora/base"] = (results["lora"]["output_tokens_per_s"]
                            / results["base"]["output_tokens_per_s"])
    print(f"LoRA keeps {results['lora/base']:.1%} of the throughput without it")
    Path(args.output_json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
