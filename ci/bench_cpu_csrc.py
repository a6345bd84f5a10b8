"""Time pagoda-cpu's native kernels (provider "cpu_csrc") against the providers they
displace (median microseconds per call, caches warm, SmolLM2-135M's shapes).

    python ci/bench_cpu_csrc.py [--threads 2] [--reps 200]
    PAGODA_CPU_ISA=avx2 python ci/bench_cpu_csrc.py   # the AVX2 build on an AVX-512 CPU

Rows: woq_linear (GGUF Q4_1 and Q8_0 blocks, 576->1536 and 1536->576) at 1, 16 and 64
tokens against "cpu_native" (the int4 kernel for bfloat16, else a dense weight) and the
elementwise ops of a decode step at 1 and 16 tokens against "cpu_native" (or core's
reference where the CPU had no provider), and cpu_sdpa's decode attention (1 and 16
sequences of 256 tokens) against its PyTorch path; then the three float32 paths of
woq_linear (GEMV, GEMM, dequantize + linear) at 8 to 2048 rows, and the GEMV kernel on
activations as they are against activations rounded to int8 blocks (quantization
gguf_a8: integer sums) at 1 to 8 rows. Other processes on the machine move these numbers:
compare within a row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator

import torch

from pagoda.ops import reference
from pagoda.quant.rtn import group_weight
from pagoda_cpu import csrc, csrc_ops, ops, paged_attention, quant_ops

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD = 576, 1536, 9, 3, 64


def median_us(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def woq_rows(dtype: torch.dtype) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    rows = []
    for label, bits, k, n in (("Q4_1", 4, HIDDEN, INTERMEDIATE), ("Q4_1", 4, INTERMEDIATE, HIDDEN),
                              ("Q8_0", 8, HIDDEN, INTERMEDIATE)):
        weight = group_weight(torch.randn(n, k) * k**-0.5, bits, 32, symmetric=bits == 8)
        ours = csrc_ops.prepare_woq(weight, dtype)
        theirs = quant_ops.prepare_woq(weight, dtype)
        for m in (1, 16, 64):
            x = torch.randn(m, k).to(dtype)
            rows.append((f"woq {label} {k}->{n} M={m}",
                         lambda x=x, w=ours: csrc_ops.woq_linear(x, w),
                         lambda x=x, w=theirs: quant_ops.woq_linear(x, w)))
    return rows


def elementwise_rows(dtype: torch.dtype) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    kern = csrc.native()
    assert kern is not None
    w = torch.randn(HIDDEN).to(dtype)
    cache = torch.randn(8192, HEAD)
    rows = []
    for m in (1, 16):
        x, r = torch.randn(m, HIDDEN).to(dtype), torch.randn(m, HIDDEN).to(dtype)
        gate_up = torch.randn(m, 2 * INTERMEDIATE).to(dtype)
        qkv = torch.randn(m, (HEADS + 2 * KV_HEADS) * HEAD).to(dtype)
        q = qkv[:, : HEADS * HEAD].view(m, HEADS, HEAD)
        k = qkv[:, HEADS * HEAD: (HEADS + KV_HEADS) * HEAD].view(m, KV_HEADS, HEAD)
        pos = torch.arange(100, 100 + m)
        rows += [
            (f"rms_norm M={m}", lambda x=x: kern.rms_norm(x, w, 1e-5),
             lambda x=x: ops.rms_norm(x, w, 1e-5)),
            (f"fused_add_rms_norm M={m}", lambda x=x, r=r: kern.fused_add_rms_norm(x, r, w, 1e-5),
             lambda x=x, r=r: ops.fused_add_rms_norm(x, r, w, 1e-5)),
            (f"silu_and_mul M={m}", lambda g=gate_up: kern.silu_and_mul(g),
             lambda g=gate_up: ops.silu_and_mul(g)),
            (f"rotary_embedding M={m} (vs reference)",
             lambda q=q, k=k, p=pos: kern.rotary_embedding(p, q, k, cache, True),
             lambda q=q, k=k, p=pos: reference.rotary_embedding(p, q, k, cache, True)),
        ]
    return rows


def attention_rows(dtype: torch.dtype) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    kern = csrc.native()
    assert kern is not None
    block, length = 16, 256
    rows = []
    for batch in (1, 16):
        blocks = batch * length // block
        cache = torch.randn(2, blocks, block, KV_HEADS, HEAD).to(dtype)
        tables = torch.randperm(blocks, dtype=torch.int32).view(batch, -1)
        q = torch.randn(batch, HEADS, HEAD).to(dtype)
        lens = [length] * batch
        rows.append((f"decode attention B={batch} len={length} (vs matmuls)",
                     lambda q=q, c=cache, t=tables, n=lens: kern.decode_attention(
                         q, c, t, torch.tensor(n), 0.125, 0, 0.0),
                     lambda q=q, c=cache, t=tables, n=lens: paged_attention.decode_matmuls(
                         q, c, t, n, 0.125, None, None, None)))
    return rows


def packed_weights() -> Iterator[tuple[str, int, int, csrc_ops.PackedWoqWeight]]:
    """(label, K, N, the native kernels' weight) of SmolLM2's gate_up and down (Q4_1) and its
    head (Q8_0), random."""
    for label, bits, k, n in (("Q4_1", 4, HIDDEN, 2 * INTERMEDIATE), ("Q4_1", 4, INTERMEDIATE, HIDDEN),
                              ("Q8_0", 8, HIDDEN, 49152)):
        weight = group_weight(torch.randn(n, k) * k**-0.5, bits, 32, symmetric=bits == 8)
        yield label, k, n, csrc_ops.prepare_woq(weight, torch.float32)


def woq_paths(reps: int) -> None:
    """The three float32 paths of `csrc_ops.woq_linear` side by side at each row count:
    the GEMV kernel, the GEMM kernel and the weight dequantized for `ops.linear` (what
    `csrc_ops.ROW_LIMITS` is chosen from)."""
    kern = csrc.native()
    assert kern is not None
    print("\n| float32 woq_linear paths | GEMV | GEMM | dequantize + linear |\n| --- | --- | --- | --- |")
    for label, k, n, w in packed_weights():
        packed = (w.codes, w.scales, w.offsets, w.bits)
        for m in (8, 16, 64, 512, 2048):
            x = torch.randn(m, k)
            paths = (lambda x=x, p=packed: kern.woq_gemv(x, *p),
                     lambda x=x, p=packed: kern.woq_gemm(x, *p),
                     lambda x=x, p=packed: ops.linear(x, kern.woq_dequantize(*p)))
            times = [median_us(fn, max(3, reps * 8 // m)) for fn in paths]
            print(f"| {label} {k}->{n} M={m} | " + " | ".join(f"{t:.0f}" for t in times) + " |")


def int8_activation_gemv(reps: int) -> None:
    """The GEMV kernel on float32 activations against the same rows rounded to int8 blocks
    of 32 (`act_block`, gguf_a8's), whose blocks' products it sums in integers."""
    kern = csrc.native()
    assert kern is not None
    print("\n| GEMV | float32 x | int8 x | speed-up |\n| --- | --- | --- | --- |")
    for label, k, n, w in packed_weights():
        packed = (w.codes, w.scales, w.offsets, w.bits, None)
        for m in (1, 4, 8):
            x = torch.randn(m, k)
            a, b = (median_us(lambda x=x, p=packed, block=block: kern.woq_gemv(x, *p, block),
                              max(3, reps * 1536 // n)) for block in (0, 32))
            print(f"| {label} {k}->{n} M={m} | {a:.1f} | {b:.1f} | {a / b:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    csrc.native()
    from pagoda_cpu import _C

    print(f"native kernels: {_C.isa()}; native bf16: {quant_ops.fast_bf16()}; "
          f"{args.threads} thread(s); median microseconds per call")
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        print(f"\n| {name} | cpu_csrc | before | speed-up |\n| --- | --- | --- | --- |")
        for label, ours, theirs in woq_rows(dtype) + elementwise_rows(dtype) + attention_rows(dtype):
            a, b = median_us(ours, args.reps), median_us(theirs, args.reps)
            print(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")
    woq_paths(args.reps)
    int8_activation_gemv(args.reps)


if __name__ == "__main__":
    main()
