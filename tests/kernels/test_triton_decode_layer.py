"""The shared Triton kernels' fused decode layer (`pagoda.kernels.triton.decode_layer`, the
CUDA platform's `fuse_decode_layer`) drives a real model: a tiny Llama's greedy tokens and
logprobs, one sequence at a time, are the same bit for bit with its layers fused (with
and without the norms) and op by op, with dense float32 weights and with FP8 and INT4
weights quantized at load (here on the CPU in Triton's interpreter, the kernels registered
as the CPU's providers; on a GPU, tests/platforms/cuda runs the CUDA platform's own)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from pagoda import LLM  # noqa: E402
from pagoda.kernels.triton.decode_layer import TritonDecodeLayer, fuse_decode_layer  # noqa: E402
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH  # noqa: E402
from pagoda.kernels.triton.launched import LaunchedKernels  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_QUANT_OPS  # noqa: E402
from pagoda.models.decode_fusion import decode_layer_spec  # noqa: E402
from pagoda.plugins import KernelProvider, get_registries, reset_registries  # noqa: E402
from tests.engine.fused_layers import (  # noqa: E402
    CountingFusedLayer,
    decoder_layers,
    greedy_logprobs,
)
from tests.engine.tiny_models import VOCAB, make_checkpoint, wide_llama_config  # noqa: E402

KERNELS = LaunchedKernels(lambda device: DEFAULT_LAUNCH)
"""The shared kernels with Triton's default launches (the providers' targets below)."""

OPS = ("linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")
NEW_TOKENS = 3


@pytest.fixture
def triton_on_cpu(device: str, monkeypatch: pytest.MonkeyPatch):
    """The shared Triton kernels as the CPU's providers, and its layers fused as CUDA's."""
    if device != "cpu":
        pytest.skip("on a GPU, tests/platforms/cuda runs the CUDA platform's fused layers")
    from pagoda_cpu.platform import CpuPlatform

    regs = get_registries()
    here = f"{__name__}:KERNELS"
    for op in OPS:
        regs.kernels.add(KernelProvider(op, "triton", f"{here}.{op}", ("cpu",), priority=100),
                         "test")
    for op in TRITON_QUANT_OPS:
        kind = op.split("_")[0]
        regs.kernels.add(KernelProvider(
            op, "triton", f"{here}.{op}", ("cpu",), priority=100,
            prepare=f"pagoda.kernels.triton.quant_linear:prepare_{kind}",
            supports=f"pagoda.kernels.triton.quant_linear:supports_{kind}"), "test")
    monkeypatch.setattr(CpuPlatform, "fuse_decode_layer",
                        lambda self, spec: fuse_decode_layer(spec, KERNELS))
    yield
    reset_registries()


@pytest.mark.parametrize("fuse_norms", [True, False])
@pytest.mark.parametrize("quantization", [None, "fp8", "int4"])
def test_fused_layers_match_op_by_op(triton_on_cpu, tmp_path: Path,
                                     quantization: str | None, fuse_norms: bool) -> None:
    path = make_checkpoint(tmp_path, wide_llama_config(), random_weights=True)
    # One sequence a step (the fused layers' max_rows); no prefix caching, so that the second
    # run of the prompts computes what the first did.
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=32, block_size=8,
              max_num_seqs=1, enable_prefix_caching=False, quantization=quantization)
    layers = decoder_layers(llm)
    fused = [layer.fused_decode for layer in layers]
    assert len(layers) == 2 and all(isinstance(f, TritonDecodeLayer) for f in fused)
    spec = decode_layer_spec(layers[0])
    assert spec is not None
    # Quantized layers are fused only where asked (the CUDA platform's default leaves them)
    assert (fuse_decode_layer(spec, KERNELS, quantized=False) is None) == bool(quantization)
    # The qkv kernels rotate the heads themselves, but for FP8's on one multiprocessor (the
    # interpreter's): tiles of 64 rows, more than a head of 32.
    assert all(f.rotates == (quantization != "fp8") for f in fused)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in (6, 13)]
    calls: list[int] = []
    for layer, f in zip(layers, fused, strict=True):
        f.fuse_norms = fuse_norms  # else the norm kernels run before qkv and gate_up
        layer.fused_decode = CountingFusedLayer(f, calls)
    with_fusion = greedy_logprobs(llm, prompts, NEW_TOKENS)
    assert len(calls) == 2 * 2 * (NEW_TOKENS - 1)  # every layer of every decode step
    for layer in layers:
        layer.fused_decode = None
    assert with_fusion == greedy_logprobs(llm, prompts, NEW_TOKENS)


def test_declines_layers_it_cannot_run(triton_on_cpu, tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, wide_llama_config())
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=32, block_size=8)
    spec = decode_layer_spec(decoder_layers(llm)[0])
    assert spec is not None and fuse_decode_layer(spec, KERNELS) is not None
    reference = dataclasses.replace(spec.down, op=torch.nn.functional.linear)
    for changed in (
        dataclasses.replace(spec, act_and_mul=KERNELS.gelu_and_mul),  # another activation
        dataclasses.replace(spec, rms_norm=torch.nn.functional.rms_norm),  # not the kernel
        dataclasses.replace(spec, down=reference),  # a linear run by another op
    ):
        assert fuse_decode_layer(changed, KERNELS) is None
