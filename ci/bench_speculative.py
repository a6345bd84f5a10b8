"""Speculative decoding (n-gram prompt lookup) beside plain decoding, in one run, on a
copy-heavy workload: prompts whose answers repeat spans of the prompt (a function to
rewrite). Greedy, so both runs must give the same tokens (checked).

    python ci/bench_speculative.py [--device cpu] [--requests 8] [--max-tokens 128] [MODEL]
"""

from __future__ import annotations

import argparse
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    args = parser.parse_args()

    from pagoda import LLM, SamplingParams

    conversations = [[{"role": "user", "content": f"{FUNCTION}\n{TASKS[i % len(TASKS)]}"}]
                     for i in range(args.requests)]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    runs = {}
    for name, options in (("plain", {}), ("ngram", {
            "speculative_method": "ngram",
            "num_speculative_tokens": args.num_speculative_tokens})):
        llm = LLM(args.model, device=args.device, **options)
        llm.chat(conversations[:1], SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outputs = llm.chat(conversations, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        tokens = [o.outputs[0].token_ids for o in outputs]
        drafts = sum(o.metrics.get("spec_draft_tokens", 0) for o in outputs)
        accepted = sum(o.metrics.get("spec_accepted_tokens", 0) for o in outputs)
        runs[name] = tokens
        total = sum(len(t) for t in tokens)
        print(f"{name}: {total} tokens in {elapsed:.2f} s = {total / elapsed:.1f} tok/s"
              + (f"; drafts accepted {accepted} of {drafts}" if drafts else ""))
        del llm
    assert runs["plain"] == runs["ngram"], "greedy tokens differ with speculation"
    print("greedy tokens identical with and without speculation")


if __name__ == "__main__":
    main()
