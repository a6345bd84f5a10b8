"""The CPU's fused decode step of a decoder layer (`pagoda_cpu.decode_layer`, core's
`pagoda.models.decode_fusion`): SmolLM2 with its Q4_1/Q8_0 weights packed gives the same
tokens and the same logprobs, bit for bit, with its layers fused and op by op, at one
sequence (the GEMV kernel) and at twelve (the GEMM kernel); layers whose ops are not all
the native kernels' are declined."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pagoda import LLM
from pagoda.models.decode_fusion import decode_layer_spec
from tests.engine.fused_layers import CountingFusedLayer, decoder_layers, greedy_logprobs

pytest.importorskip("pagoda_cpu._C", reason="pagoda-cpu's native kernels are not built")

NEW_TOKENS = 20


@pytest.fixture(scope="module")
def llm():
    from pagoda.model_source import resolve_model

    # No prefix caching: the second run of the same prompts would prefill less of them.
    return LLM(str(resolve_model("smollm2-135m-instruct").path), dtype="float32",
               max_model_len=512, quantization="gguf", enable_prefix_caching=False)


@pytest.mark.parametrize("num_prompts", [1, 12])
def test_fused_layers_match_op_by_op(llm, num_prompts):
    layers = decoder_layers(llm)
    fused = [layer.fused_decode for layer in layers]
    assert len(layers) == 30 and all(f is not None for f in fused)
    gen = torch.Generator().manual_seed(num_prompts)
    prompts = [torch.randint(3, 49152, (5 + 7 * i,), generator=gen).tolist()
               for i in range(num_prompts)]
    calls = []
    for layer in layers:  # count the fused steps (a wrapper of the native object)
        layer.fused_decode = CountingFusedLayer(layer.fused_decode, calls)
    try:
        with_fusion = greedy_logprobs(llm, prompts, NEW_TOKENS)
        assert len(calls) == 30 * (NEW_TOKENS - 1)  # every decode step, every layer
        for layer in layers:
            layer.fused_decode = None
        op_by_op = greedy_logprobs(llm, prompts, NEW_TOKENS)
    finally:
        for layer, f in zip(layers, fused, strict=True):
            layer.fused_decode = f
    assert with_fusion == op_by_op


def test_declines_layers_whose_ops_are_not_the_native_kernels(llm):
    from pagoda_cpu.decode_layer import fuse_decode_layer

    spec = decode_layer_spec(decoder_layers(llm)[0])
    assert spec is not None and fuse_decode_layer(spec) is not None
    dense = dataclasses.replace(spec.down, weight=torch.zeros(576, 1536))
    for changed in (
        dataclasses.replace(spec, act_and_mul=torch.nn.functional.gelu),  # another activation
        dataclasses.replace(spec, down=dense),  # a dense weight
        dataclasses.replace(spec, qkv=dataclasses.replace(spec.qkv, op=torch.nn.functional.linear)),
        dataclasses.replace(spec, input_norm=spec.input_norm.bfloat16()),  # not float32
    ):
        assert fuse_decode_layer(changed) is None


def test_layers_with_lora_are_not_described(llm):
    layer = decoder_layers(llm)[0]
    layer.self_attn.o_proj.lora = object()  # any adapter slots
    try:
        assert decode_layer_spec(layer) is None
    finally:
        layer.self_attn.o_proj.lora = None
