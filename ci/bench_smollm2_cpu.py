"""SmolLM2-135M-Instruct on this CPU, side by side in one run: Pagoda, HF transformers
(same GGUF file) and llama.cpp (llama-cpp-python, same file, same thread count).

    pip install llama-cpp-python          # benchmark-only; builds llama.cpp (~5 min)
    python ci/bench_smollm2_cpu.py --output-json smollm2.json

llama.cpp builds for the CPU it is built on; to compare on the AVX2 paths of an AVX-512
machine, build it without AVX-512 into a folder of its own and put that first:

    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON" \
        pip install --no-binary llama-cpp-python --target /tmp/llama_avx2 llama-cpp-python
    PYTHONPATH=/tmp/llama_avx2 PAGODA_CPU_ISA=avx2 ... python ci/bench_smollm2_cpu.py

Figures: single-stream decode tokens/s (128 new tokens), prefill tokens/s of a 512-token
prompt, and total output tokens/s for 16 and 64 concurrent ~64-token prompts with 128 new
tokens each. Greedy decoding, end-of-sequence ignored, random token prompts. Each engine
runs in a process of its own, one after the other. With --rounds N the engines run N times,
in reverse order every other round, and each figure is the median over the rounds: a
machine that slows (or speeds up) during a run then shifts every engine alike instead of
flattering the ones that run first.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

NEW_TOKENS = 128
PREFILL_LEN = 512
CONCURRENT_PROMPT_LEN = 64


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


def _median_of(runs: int, fn: Callable[[int], float]) -> float:
    """The median of `runs` measurements fn(0), fn(1), ... (each a rate: higher is better).
    Each run gets fresh prompts, so no engine can answer from a prefix cache."""
    return statistics.median(fn(run) for run in range(runs))


class PagodaRunner:
    def __init__(self, label: str, **llm_kwargs: Any):
        from pagoda import LLM, SamplingParams

        self.name = label
        self.llm = LLM(**llm_kwargs)
        self.params = SamplingParams
        self.vocab = self.llm.engine.hf_config.vocab_size

    def _run(self, prompts: list[list[int]], new: int) -> tuple[float, list[Any]]:
        params = self.params(temperature=0.0, max_tokens=new, ignore_eos=True, detokenize=False)
        start = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params,
                                 use_tqdm=False)
        return time.perf_counter() - start, outs

    def decode(self, prompt: list[int]) -> float:
        _, (out,) = self._run([prompt], NEW_TOKENS)
        m = out.metrics
        return (NEW_TOKENS - 1) / (m["last_token_time"] - m["first_token_time"])

    def prefill(self, prompt: list[int]) -> float:
        elapsed, _ = self._run([prompt], 1)
        return len(prompt) / elapsed

    def concurrent(self, prompts: list[list[int]]) -> float:
        elapsed, _ = self._run(prompts, NEW_TOKENS)
        return len(prompts) * NEW_TOKENS / elapsed


class HFRunner:
    """transformers' own GGUF load; concurrent prompts as one static batch (equal lengths)."""

    def __init__(self, path: Any, dtype: torch.dtype):
        from transformers import AutoModelForCausalLM

        self.name = f"HF transformers ({str(dtype).removeprefix('torch.')})"
        self.model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=dtype).eval()

    @torch.inference_mode()
    def _generate(self, prompts: list[list[int]], new: int) -> float:
        ids = torch.tensor(prompts)
        start = time.perf_counter()
        self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                            min_new_tokens=new, do_sample=False, eos_token_id=None,
                            pad_token_id=0)
        return time.perf_counter() - start

    def decode(self, prompt: list[int]) -> float:
        first = self._generate([prompt], 1)
        return (NEW_TOKENS - 1) / (self._generate([prompt], NEW_TOKENS) - first)

    def prefill(self, prompt: list[int]) -> float:
        return len(prompt) / self._generate([prompt], 1)

    def concurrent(self, prompts: list[list[int]]) -> float:
        return len(prompts) * NEW_TOKENS / self._generate(prompts, NEW_TOKENS)


class LlamaCppRunner:
    """llama.cpp through llama-cpp-python's low-level API; concurrent prompts decode as
    parallel sequences of one batch, the way llama.cpp's own server batches them."""

    def __init__(self, path: Any, threads: int, flash_attn: bool):
        import llama_cpp

        self.lib = llama_cpp
        features = llama_cpp.llama_print_system_info().decode()
        isa = "AVX-512" if "AVX512 = 1" in features else "AVX2" if "AVX2 = 1" in features \
            else "no AVX2"
        self.name = f"llama.cpp {llama_cpp.__version__} ({isa} build, {threads} threads" + (
            ", flash-attn)" if flash_attn else ")")
        self.llm = llama_cpp.Llama(str(path), n_ctx=512, n_threads=threads, verbose=False)
        # Llama() makes a one-sequence context; decode parallel sequences in our own.
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = 64 * (CONCURRENT_PROMPT_LEN + NEW_TOKENS)
        params.n_batch = params.n_ubatch = 64 * CONCURRENT_PROMPT_LEN  # all prompts in one batch
        params.n_seq_max = 64
        if hasattr(params, "kv_unified"):
            params.kv_unified = True  # one cache shared by all sequences (the 512 prompt)
        params.n_threads = params.n_threads_batch = threads
        if hasattr(params, "flash_attn_type"):
            params.flash_attn_type = 1 if flash_attn else 0
        else:
            params.flash_attn = flash_attn
        self.ctx = llama_cpp.llama_init_from_model(self.llm._model.model, params)
        self.vocab = self.llm.n_vocab()

    def _decode_batch(self, seqs: list[list[int]]) -> list[int]:
        """Feed each sequence's tokens (positions continue per sequence); return each
        sequence's greedy next token."""
        lib, ctx = self.lib, self.ctx
        total = sum(len(s) for s in seqs)
        batch = lib.llama_batch_init(total, 0, 1)
        last_rows = []
        try:
            i = 0
            for seq_id, tokens in enumerate(seqs):
                for j, token in enumerate(tokens):
                    batch.token[i] = token
                    batch.pos[i] = self._pos[seq_id] + j
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = seq_id
                    batch.logits[i] = j == len(tokens) - 1
                    i += 1
                last_rows.append(i - 1)
                self._pos[seq_id] += len(tokens)
            batch.n_tokens = total
            if lib.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
        finally:
            lib.llama_batch_free(batch)
        return [self._argmax(row) for row in last_rows]

    def _argmax(self, row: int) -> int:
        import numpy as np

        logits = self.lib.llama_get_logits_ith(self.ctx, row)
        return int(np.ctypeslib.as_array(logits, shape=(self.vocab,)).argmax())

    def _generate(self, prompts: list[list[int]], new: int) -> tuple[float, float]:
        """(seconds to the first tokens, seconds in total)."""
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)
        self._pos = [0] * len(prompts)
        start = time.perf_counter()
        tokens = self._decode_batch(prompts)
        first = time.perf_counter() - start
        for _ in range(new - 1):
            tokens = self._decode_batch([[t] for t in tokens])
        return first, time.perf_counter() - start

    def decode(self, prompt: list[int]) -> float:
        first, total = self._generate([prompt], NEW_TOKENS)
        return (NEW_TOKENS - 1) / (total - first)

    def prefill(self, prompt: list[int]) -> float:
        first, _ = self._generate([prompt], 1)
        return len(prompt) / first

    def concurrent(self, prompts: list[list[int]]) -> float:
        _, total = self._generate(prompts, NEW_TOKENS)
        return len(prompts) * NEW_TOKENS / total


RESULT = "RESULT "
"""Prefix of the line a runner process prints its results on."""


def _measure(runner: Any, runs: int, concurrent: list[int]) -> tuple[str, dict[str, float]]:
    vocab = 49152
    runner.decode(_prompts(1, 8, vocab, 0)[0])  # warm-up
    row = {
        "decode_tok_s": _median_of(
            runs, lambda i: runner.decode(_prompts(1, 32, vocab, 100 + i)[0])),
        "prefill_512_tok_s": _median_of(
            runs, lambda i: runner.prefill(_prompts(1, PREFILL_LEN, vocab, 200 + i)[0])),
    }
    for n in concurrent:
        row[f"concurrent_{n}_out_tok_s"] = _median_of(
            max(1, runs - 1),
            lambda i, n=n: runner.concurrent(_prompts(n, CONCURRENT_PROMPT_LEN, vocab,
                                                      1000 * n + i)))
    return runner.name, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="median of this many runs")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every engine this many times, alternating their order, "
                             "and report each figure's median over the rounds")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--skip", default="",
                        help="comma list: hf, llama.cpp, quant, dense (the two dequantized "
                             "Pagoda rows), a8 (--quantization gguf_a8: llama.cpp's 8-bit "
                             "activations)")
    parser.add_argument("--concurrent", default="16,64",
                        help="comma list of the concurrent-prompt columns to run")
    parser.add_argument("--output-json", default=None)
    parser.add_argument("--runner", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    concurrent = [int(n) for n in args.concurrent.split(",") if n]

    from pagoda.model_source import resolve_model

    path = resolve_model("smollm2-135m-instruct").path
    runners: list[Callable[[], Any]] = [lambda: PagodaRunner("pagoda (default settings)")]
    if "a8" not in skip:
        runners.append(lambda: PagodaRunner("pagoda (gguf_a8: 8-bit activations)",
                                            dtype="float32", quantization="gguf_a8"))
    if "dense" not in skip:
        runners += [
            lambda: PagodaRunner("pagoda (float32, dequantized)", dtype="float32",
                                 quantization="none"),
            lambda: PagodaRunner("pagoda (bfloat16, dequantized)", dtype="bfloat16",
                                 quantization="none"),
        ]
    if "quant" not in skip:
        # bfloat16 activations: PyTorch's int4 kernel where bf16 is native, else the native GEMV.
        runners.append(lambda: PagodaRunner("pagoda (Q4/Q8_0 kept, bfloat16)",
                                            quantization="gguf", dtype="bfloat16"))
    if "hf" not in skip:
        runners.append(lambda: HFRunner(path, torch.float32))
    if "llama.cpp" not in skip:
        runners.append(lambda: LlamaCppRunner(path, args.threads, flash_attn=False))

    if args.runner is not None:  # one engine, in this process of its own
        name, row = _measure(runners[args.runner](), args.runs, concurrent)
        print(RESULT + json.dumps({"name": name, "row": row}), flush=True)
        return
    rounds: dict[str, list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        order = range(len(runners)) if round_ % 2 == 0 else reversed(range(len(runners)))
        for index in order:
            # Each engine in a fresh process: none shares the cores with another's threads
            # or runs in a heap another left behind.
            out = subprocess.run(
                [sys.executable, __file__, *sys.argv[1:], "--runner", str(index)],
                stdout=subprocess.PIPE, text=True, check=True).stdout
            result = json.loads(next(line for line in out.splitlines()
                                     if line.startswith(RESULT))[len(RESULT):])
            rounds.setdefault(result["name"], []).append(result["row"])
            print(f"round {round_ + 1}:", result["name"],
                  {k: round(v, 1) for k, v in result["row"].items()}, flush=True)
    results = {name: {key: statistics.median(row[key] for row in rows) for key in rows[0]}
               for name, rows in rounds.items()}

    keys = ["decode_tok_s", "prefill_512_tok_s", *(f"concurrent_{n}_out_tok_s" for n in concurrent)]
    columns = ["engine", "decode 1 stream (tok/s)", "prefill 512 (tok/s)",
               *(f"{n} × 128 out (tok/s)" for n in concurrent)]
    print("\n| " + " | ".join(columns) + " |\n|" + " --- |" * len(columns))
    for name, row in results.items():
        print(f"| {name} | " + " | ".join(f"{row[k]:.1f}" for k in keys) + " |")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
