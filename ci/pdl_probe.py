"""Probe: does this Triton launch kernels with programmatic dependent launch, inside a CUDA
graph too, and what does it save on a chain of small kernels?"""
import time

import torch
import triton
import triton.language as tl

print("triton", triton.__version__)
try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError as exc:
    print("no gdc:", exc)
    raise SystemExit(0) from None


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_launch_dependents()
        gdc_wait()
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=ok) + 1, mask=ok)


def chain(a, b, pdl, k=200):
    for _ in range(k // 2):
        add_one[(a.numel() // 1024,)](a, b, a.numel(), BLOCK=1024, PDL=pdl, launch_pdl=pdl)
        add_one[(a.numel() // 1024,)](b, a, a.numel(), BLOCK=1024, PDL=pdl, launch_pdl=pdl)


for pdl in (False, True):
    a = torch.zeros(1 << 16, device="cuda")
    b = torch.zeros_like(a)
    chain(a, b, pdl)
    torch.cuda.synchronize()
    assert a.eq(200).all(), a[:4]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain(a, b, pdl)
    a.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert a.eq(200).all(), (pdl, a[:4])
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(50):
        g.replay()
    torch.cuda.synchronize()
    print(f"pdl={pdl}: {(time.perf_counter() - t) / 50 / 200 * 1e6:.2f} us per kernel in a graph,"
          f" correct")
