"""Profile engine steps: wall time per decode step, and where host and device time go.

    python ci/profile_step.py MODEL_DIR --device cuda --load-format dummy --num-seqs 256

Engine options are `pagoda serve`'s (`--max-num-batched-tokens` defaults to 8192 here);
`--max-num-seqs` must hold `--num-seqs`.

Adds `--num-seqs` requests of `--input-len` random tokens and steps until every request is
decoding, timing each prefill step and profiling the second (the first may still compile);
then times `--steps` decode steps (synchronising the device after each, then only after
the last, as a server steps), profiles a few with torch.profiler, and prints the top
operators by device and by host time. With
`--lora-adapters N`, request i runs random adapter i % N (rank `--max-lora-rank`, every
attention and MLP projection; LoRA on with `--max-loras N`).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

from pagoda import LoRARequest, SamplingParams
from pagoda.cli.dataclass_args import dataclass_from_args
from pagoda.cli.engine_args import add_engine_arguments
from pagoda.config import EngineConfig
from pagoda.frontend.llm_engine import LLMEngine
from pagoda.platforms import resolve_platform


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_arguments(parser)
    parser.set_defaults(max_num_batched_tokens=8192)
    parser.add_argument("--num-seqs", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--lora-adapters", type=int, default=0)
    args = parser.parse_args()
    if args.num_seqs > args.max_num_seqs:
        parser.error(f"--num-seqs {args.num_seqs} needs --max-num-seqs >= {args.num_seqs}")
    if args.lora_adapters:
        args.enable_lora, args.max_loras = True, args.lora_adapters

    config = dataclass_from_args(EngineConfig, args)
    engine = LLMEngine(config)
    adapters = _random_adapters(engine.hf_config, args.lora_adapters, args.max_lora_rank)
    platform = resolve_platform(config.device)
    rng = random.Random(0)
    params = SamplingParams(temperature=0.0, max_tokens=args.steps * 3 + 10, ignore_eos=True,
                            detokenize=False)
    vocab = engine.hf_config.vocab_size
    for i in range(args.num_seqs):
        prompt = [rng.randrange(3, vocab) for _ in range(args.input_len)]
        engine.add_request(str(i), {"prompt_token_ids": prompt}, params,
                           lora_request=adapters[i % len(adapters)] if adapters else None)
    activities = [ProfilerActivity.CPU]
    if platform.device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    def prefilling() -> bool:
        scheduler = engine.core.scheduler
        return bool(scheduler.num_waiting) or any(
            r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running)

    start = time.perf_counter()
    step_ms = []
    while prefilling():
        began = time.perf_counter()
        if len(step_ms) == 1:
            with profile(activities=activities) as prof:
                engine.step()
                platform.synchronize()
            prefill_profile = prof.key_averages()
        else:
            engine.step()
            platform.synchronize()
        step_ms.append((time.perf_counter() - began) * 1e3)
    print(f"prefill ({args.num_seqs} x {args.input_len}): "
          f"{(time.perf_counter() - start) * 1e3:.1f} ms in {len(step_ms)} steps "
          f"({', '.join(f'{t:.0f}' for t in step_ms)} ms)")
    if len(step_ms) > 1:
        print("== the second prefill step (profiled, so slower than the others)")
        _print_table(prefill_profile, platform.device_type, args.rows)
    for _ in range(3):
        engine.step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        engine.step()
        platform.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    print(f"decode step, {args.num_seqs} seqs: median {times[len(times) // 2] * 1e3:.2f} ms, "
          f"min {times[0] * 1e3:.2f} ms -> {args.num_seqs / times[len(times) // 2]:.0f} tok/s")
    start = time.perf_counter()
    for _ in range(args.steps):  # as a server steps: the host prepares a step while the
        engine.step()  # device runs the one before (where scheduling is asynchronous)
    platform.synchronize()
    overlapped = (time.perf_counter() - start) / args.steps
    print(f"decode step, {args.num_seqs} seqs, not waiting for each: {overlapped * 1e3:.2f} ms "
          f"-> {args.num_seqs / overlapped:.0f} tok/s")

    with profile(activities=activities) as prof:
        for _ in range(3):
            engine.step()
        platform.synchronize()
    print(f"== three decode steps of {args.num_seqs} sequences")
    _print_table(prof.key_averages(), platform.device_type, args.rows)


def _random_adapters(hf_config: object, count: int, rank: int) -> list[LoRARequest]:
    import torch

    from pagoda.testing.lora_adapter import write_random_adapter

    root = Path(tempfile.mkdtemp(prefix="profile-lora-"))
    return [LoRARequest(f"adapter{i}", i + 1, str(write_random_adapter(
        hf_config, root / f"adapter{i}", rank=rank, seed=i, dtype=torch.bfloat16)))
        for i in range(count)]


def _print_table(averages, device_type: str, rows: int) -> None:
    if device_type == "cuda":
        print(averages.table(sort_by="self_cuda_time_total", row_limit=rows))
    print(averages.table(sort_by="self_cpu_time_total", row_limit=rows))


if __name__ == "__main__":
    main()
