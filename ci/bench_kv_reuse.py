"""Runs of concurrent requests in one engine on the CPU: output tokens/s and the resident
set after each run, to see what the KV block pool's order costs in page faults and memory.

    python ci/bench_kv_reuse.py [--no-prefix-caching]

SmolLM2-135M-Instruct (the embedded default) with the default settings; each run is
`--prompts` fresh random prompts of 64 tokens, 128 new tokens each, greedy (no prefix is
shared, so a run's blocks are only reusable as memory already written).
"""

from __future__ import annotations

import argparse
import random
import time

from pagoda import LLM, SamplingParams
from pagoda.bench.memory import resident_bytes
from pagoda.model_source import resolve_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=64)
    args = parser.parse_args()
    llm = LLM(str(resolve_model("smollm2-135m-instruct").path), device="cpu",
              enable_prefix_caching=not args.no_prefix_caching)
    params = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True,
                            detokenize=False)
    for run in range(args.runs):
        rng = random.Random(run)
        prompts = [{"prompt_token_ids": [rng.randrange(3, 49000) for _ in range(64)]}
                   for _ in range(args.prompts)]
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        rate = args.prompts * 128 / (time.perf_counter() - start)
        resident = resident_bytes() or 0
        print(f"run {run + 1}: {rate:.1f} out tok/s, resident {resident / 2**20:.0f} MiB",
              flush=True)


if __name__ == "__main__":
    main()
