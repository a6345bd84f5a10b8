"""The shared Triton kernels' fused decode layer (`pagoda.kernels.triton.decode_layer`, the
CUDA platform's `fuse_decode_layer`) drives a real model: a tiny Llama's greedy tokens and
logprobs, one sequence at a time, are the same bit for bit with its layers fused and op
by op, with dense float32 weights and with FP8 and INT4 weights quantized at load (here on
the CPU in Triton's interpreter, the kernels registered as the CPU's providers; on a GPU,
tests/platforms/cuda runs the CUDA platform's own)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.kernels.triton.decode_layer import TritonDecodeLayer, fuse_decode_layer  # noqa: E402
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH  # noqa: E402
from pagoda.kernels.triton.launched import LaunchedKernels  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_QUANT_OPS  # noqa: E402
from pagoda.models.decode_fusion import decode_layer_spec  # noqa: E402
from pagoda.models.decoder import DecoderLayer  # noqa: E402
from pagoda.plugins import KernelProvider, get_registries, reset_registries  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, wide_llama_config  # noqa: E402

KERNELS = LaunchedKernels(lambda device: DEFAULT_LAUNCH)
"""The shared kernels with Triton's default launches (the providers' targets below)."""

OPS = ("linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")
NEW_TOKENS = 5


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


def _layers(llm: LLM) -> list[DecoderLayer]:
    model = llm.engine.core.executor.worker.model
    return [m for m in model.modules() if isinstance(m, DecoderLayer)]


def _run(llm: LLM, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True,
                            logprobs=0, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [(list(o.outputs[0].token_ids), [s.logprobs[0] for s in o.outputs[0].logprobs])
            for o in outs]


class _Counting:
    def __init__(self, inner: TritonDecodeLayer, calls: list[int]):
        self.inner, self.calls, self.max_rows = inner, calls, inner.max_rows

    def pre_attention(self, *args):
        self.calls.append(1)
        return self.inner.pre_attention(*args)

    def post_attention(self, *args):
        return self.inner.post_attention(*args)


@pytest.mark.parametrize("quantization", [None, "fp8", "int4"])
def test_fused_layers_match_op_by_op(triton_on_cpu, tmp_path: Path,
                                     quantization: str | None) -> None:
    path = make_checkpoint(tmp_path, wide_llama_config(), random_weights=True)
    # One sequence a step (the fused layers' max_rows); no prefix caching, so that the second
    # run of the prompts computes what the first did.
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=32, block_size=8,
              max_num_seqs=1, enable_prefix_caching=False, quantization=quantization)
    layers = _layers(llm)
    fused = [layer.fused_decode for layer in layers]
    assert len(layers) == 2 and all(isinstance(f, TritonDecodeLayer) for f in fused)
    # The qkv kernels rotate the heads themselves, but for FP8's on one multiprocessor (the
    # interpreter's): tiles of 64 rows, more than a head of 32.
    assert all(f.rotates == (quantization != "fp8") for f in fused)
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in (6, 13)]
    calls: list[int] = []
    for layer, f in zip(layers, fused, strict=True):
        layer.fused_decode = _Counting(f, calls)
    with_fusion = _run(llm, prompts)
    assert len(calls) == 2 * 2 * (NEW_TOKENS - 1)  # every layer of every decode step
    for layer in layers:
        layer.fused_decode = None
    assert with_fusion == _run(llm, prompts)


def test_declines_layers_it_cannot_run(triton_on_cpu, tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, wide_llama_config())
    llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=32, block_size=8)
    spec = decode_layer_spec(_layers(llm)[0])
    assert spec is not None and fuse_decode_layer(spec, KERNELS) is not None
    reference = dataclasses.replace(spec.down, op=torch.nn.functional.linear)
    for changed in (
        dataclasses.replace(spec, act_and_mul=KERNELS.gelu_and_mul),  # another activation
        dataclasses.replace(spec, rms_norm=torch.nn.functional.rms_norm),  # not the kernel
        dataclasses.replace(spec, down=reference),  # a linear run by another op
    ):
        assert fuse_decode_layer(changed, KERNELS) is None
