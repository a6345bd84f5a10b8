"""Speculative decoding beside plain decoding, in one run. Greedy, so both runs give the
same tokens (counted; checked in the smoke test, float32).

Two workloads:
- copy-heavy (default): chat prompts whose answers repeat spans of the prompt (a function
  to rewrite), with n-gram prompt lookup (or a draft model);
- random (`--random-prompts LEN`): token-id prompts of LEN tokens, for dummy weights (the
  8B shape with a 0.6B-shape draft: `--method draft --draft-model DIR --load-format dummy`;
  random weights agree on almost nothing, so drafts are rarely accepted and the figures
  bound the cost of proposing and verifying).

Per run: output tokens per second, the mean time per output token after the first (from
each request's first and last token times), drafts accepted of proposed.

    python ci/bench_speculative.py [--device cpu] [--requests 8] [--max-tokens 128]
        [--method ngram|draft] [--draft-model DIR] [--load-format auto|dummy]
        [--dtype auto] [--random-prompts LEN] [--disable-by-batch-size N]
        [--output-json PATH] [MODEL]

A CPU smoke test of the draft path, on tiny random models:
    python ci/bench_speculative.py --smoke
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FUNCTION = '''def fibonacci(n):
    """The n-th Fibonacci number."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def main():
    for i in range(10):
        print(i, fibonacci(i))
'''
TASKS = ["Rename fibonacci to fib everywhere and show the whole code.",
         "Add type hints to the code above and show all of it.",
         "Repeat the code above exactly, then explain it in one line.",
         "Change the loop in main to go to 20 and show the whole code."]


def _smoke_models(root: Path) -> tuple[str, str]:
    """A tiny Llama target and a tiny Qwen3 draft sharing its vocabulary (config and
    tokenizer only: they run with dummy weights)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from stand_in_tokenizer import save_stand_in_tokenizer

    common = {"vocab_size": 512, "bos_token_id": 1, "eos_token_id": 2,
              "max_position_embeddings": 1024, "torch_dtype": "float32", "rms_norm_eps": 1e-6,
              "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu"}
    configs = {
        "target": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
                   "rope_theta": 10000.0, **common},
        "draft": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                  "head_dim": 16, "rope_theta": 10000.0, "tie_word_embeddings": True,
                  **common},
    }
    for name, config in configs.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        save_stand_in_tokenizer(root / name)
    return str(root / "target"), str(root / "draft")


def _run(llm: Any, warm_prompts: list[Any], prompts: list[Any], params: Any,
         chat: bool, profile: bool = False) -> dict[str, Any]:
    """Generate `warm_prompts` untimed (the same workload with other prompts: every kernel
    and shape the timed run meets is compiled by then), then `prompts`, timed; the timed
    run's figures and tokens. `profile`: then `prompts` once more under cProfile, and the
    functions that took the host's time printed (the figures stay the unprofiled run's)."""
    generate = llm.chat if chat else llm.generate
    generate(warm_prompts, params, use_tqdm=False)
    start = time.perf_counter()
    outputs = generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(generate, prompts, params, use_tqdm=False)
        stats = pstats.Stats(profiler)
        steps = sum(calls for (file, _, name), (calls, *_) in stats.stats.items()  # type: ignore
                    if name == "step" and file.endswith(str(Path("engine", "core.py"))))
        print(f"== host time of the same run under cProfile ({steps} engine steps)")
        stats.sort_stats("tottime").print_stats(25)
    tokens = [o.outputs[0].token_ids for o in outputs]
    per_token = [(o.metrics["last_token_time"] - o.metrics["first_token_time"]) / (len(t) - 1)
                 for o, t in zip(outputs, tokens) if len(t) > 1]
    total = sum(len(t) for t in tokens)
    return {"tokens": tokens, "output_tokens": total, "elapsed_s": elapsed,
            "output_tokens_per_s": total / elapsed,
            "time_per_output_token_s": sum(per_token) / max(len(per_token), 1),
            "draft_tokens": sum(o.metrics.get("spec_draft_tokens", 0) for o in outputs),
            "accepted_tokens": sum(o.metrics.get("spec_accepted_tokens", 0) for o in outputs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--method", choices=["ngram", "draft"], default="ngram")
    parser.add_argument("--draft-model", default=None)
    parser.add_argument("--load-format", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--random-prompts", type=int, default=None, metavar="LEN")
    parser.add_argument("--disable-by-batch-size", type=int, default=None, metavar="N",
                        help="speculative_disable_by_batch_size: steps that start with more "
                             "running requests propose no drafts")
    parser.add_argument("--output-json", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="run each workload once more under cProfile and print where "
                             "the host's time went")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny random target and draft on the CPU, dummy weights")
    parser.add_argument("--only", choices=["plain", "speculative"], default=None,
                        help=argparse.SUPPRESS)  # one run, in a process of its own
    parser.add_argument("--tokens-json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        _only(args)
        return
    if args.smoke:
        args.model, args.draft_model = _smoke_models(Path(tempfile.mkdtemp()))
        args.method, args.load_format, args.random_prompts = "draft", "dummy", 32
        args.requests, args.max_tokens = 2, 16
    # Each run in a process of its own: the first engine's device memory is all back.
    runs = {}
    for name in ("plain", "speculative"):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run.json"
            subprocess.run([sys.executable, __file__, *_forwarded(args), "--only", name,
                            "--tokens-json", str(out)], check=True)
            runs[name] = json.loads(out.read_text())
        r = runs[name]
        print(f"{name}: {r['output_tokens']} tokens in {r['elapsed_s']:.2f} s = "
              f"{r['output_tokens_per_s']:.1f} tok/s, "
              f"{1e3 * r['time_per_output_token_s']:.2f} ms per output token"
              + (f"; drafts accepted {r['accepted_tokens']} of {r['draft_tokens']}"
                 if r["draft_tokens"] else ""), flush=True)
    # float32 gives the same tokens; bf16 may not (a step of k + 1 tokens rounds otherwise
    # than k + 1 steps of one, and dummy weights' logits nearly tie).
    same = sum(a == b for a, b in zip(runs["plain"]["tokens"], runs["speculative"]["tokens"]))
    print(f"greedy tokens identical with and without speculation in {same} of "
          f"{args.requests} requests")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(
            {name: {k: v for k, v in r.items() if k != "tokens"} for name, r in runs.items()}
            | {"method": args.method, "identical_requests": same, "requests": args.requests},
            indent=2))
    assert not args.smoke or same == args.requests, "greedy tokens differ with speculation"


def _forwarded(args: argparse.Namespace) -> list[str]:
    """The options of one run, as given to this script."""
    argv = [args.model] if args.model else []
    for name in ("device", "requests", "max_tokens", "num_speculative_tokens", "method",
                 "draft_model", "load_format", "dtype", "random_prompts",
                 "disable_by_batch_size"):
        if getattr(args, name) is not None:
            argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return argv + ["--profile"] * args.profile


def _only(args: argparse.Namespace) -> None:
    """One run (plain or speculative); its figures and tokens to --tokens-json."""
    from pagoda import LLM, SamplingParams

    chat = args.random_prompts is None
    prompts, warm_prompts = _prompts(args, chat, 0), _prompts(args, chat, 1)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens,
                            ignore_eos=not chat)
    speculative = {"speculative_method": args.method,
                   "num_speculative_tokens": args.num_speculative_tokens,
                   "speculative_disable_by_batch_size": args.disable_by_batch_size}
    if args.method == "draft":
        speculative["speculative_model"] = args.draft_model
    llm = LLM(args.model, device=args.device, load_format=args.load_format, dtype=args.dtype,
              **(speculative if args.only == "speculative" else {}))
    Path(args.tokens_json).write_text(json.dumps(_run(llm, warm_prompts, prompts, params,
                                                      chat, args.profile)))


def _prompts(args: argparse.Namespace, chat: bool, seed: int) -> list[Any]:
    """The workload's prompts; another seed gives other prompts of the same kind."""
    if chat:
        note = "" if seed == 0 else f"(Warm-up {seed}.) "
        tasks = [TASKS[(i + seed) % len(TASKS)] for i in range(args.requests)]
        return [[{"role": "user", "content": f"{note}{FUNCTION}\n{task}"}] for task in tasks]
    rng = random.Random(seed)
    return [{"prompt_token_ids": [rng.randrange(3, 500) for _ in range(args.random_prompts)]}
            for _ in range(args.requests)]


if __name__ == "__main__":
    main()
