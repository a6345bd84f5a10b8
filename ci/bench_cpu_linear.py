"""The CPU's dense float32 linear (`pagoda_cpu.ops.linear`, oneDNN) against F.linear (MKL's
sgemm in PyTorch's x86 builds) at SmolLM2-135M's shapes: median microseconds per call.

    python ci/bench_cpu_linear.py [--threads 2] [--reps 50]
    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python ci/bench_cpu_linear.py  # AVX2

Other processes on the machine move these numbers: compare within a row.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from bench_cpu_csrc import median_us  # this folder's: run as python ci/bench_cpu_linear.py

from pagoda_cpu.ops import linear

SHAPES = {"qkv 576->960": (576, 960), "gate_up 576->3072": (576, 3072),
          "down 1536->576": (1536, 576), "lm_head 576->49152": (576, 49152)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.threads} thread(s); median microseconds per call\n")
    print("| shape | rows | F.linear (MKL) | pagoda_cpu linear (oneDNN) | time ratio |\n"
          "| --- | --- | --- | --- | --- |")
    gen = torch.Generator().manual_seed(0)
    for name, (k, n) in SHAPES.items():
        weight = torch.randn(n, k, generator=gen) * k**-0.5
        for rows in (1, 16, 64, 512):
            if rows == 512 and n > 10000:
                continue  # the head sees one row a sequence
            x = torch.randn(rows, k, generator=gen)
            theirs = median_us(lambda x=x, w=weight: F.linear(x, w), args.reps)
            ours = median_us(lambda x=x, w=weight: linear(x, w), args.reps)
            print(f"| {name} | {rows} | {theirs:.0f} | {ours:.0f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
