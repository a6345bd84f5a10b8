"""Quantized checkpoints made by the formats' own tools (tests/quant/checkpoints.py) load
and generate like their reference, on the CPU platform's kernels.

The reference is HF transformers loading the same checkpoint where it can
(compressed-tensors: it fake-quantizes activations as the scheme says; HF fine-grained
FP8: dequantized), else the dense checkpoint of the dequantized weights (GPTQ, AWQ).
Pagoda generates greedily; the reference then scores the whole sequence in one forward
(teacher forcing, so one near-tie cannot send the two down different paths). At every
generated position the reference's top token must be Pagoda's, unless the reference's
own top two are within `TIE` (a near-tie that activation rounding may flip), and the
chosen token's log-probability must agree within the format's stated tolerance.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB
from tests.quant import checkpoints as ckpt

NEW_TOKENS = 8
TIE = 0.02
PROMPTS = [[random.Random(i).randrange(3, VOCAB) for _ in range(n)]
           for i, n in enumerate((5, 12, 3))]
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=0)

# name -> (writer, tolerance on a token's log-probability). W8A8 quantizes activations: the
# reference rounds them to int8/fp8 as well, but its scale may differ in the last place
# (compressed-tensors divides int8 ranges by 127.5, we by 127), and HF's fine-grained FP8
# does not quantize activations at all; weight-only formats compute with the same weights.
FORMATS: dict[str, tuple[Callable[[Path], ckpt.QuantCheckpoint], float]] = {
    "ct-fp8-channel": (ckpt.ct_fp8_dynamic, 0.05),
    "ct-fp8-tensor": (lambda p: ckpt.ct_fp8_dynamic(p, per_tensor=True), 0.05),
    "ct-fp8-static": (ckpt.ct_fp8_static, 0.05),
    "ct-fp8-block": (ckpt.ct_fp8_block, 0.05),
    "ct-int8": (ckpt.ct_int8_w8a8, 0.05),
    "ct-w4a16-g128": (ckpt.ct_w4a16, 2e-3),
    "ct-w4a16-g32-asym": (lambda p: ckpt.ct_w4a16(p, group_size=32, symmetric=False), 2e-3),
    "gptq-g32": (lambda p: ckpt.gptq_checkpoint(p, group_size=32), 2e-3),
    "gptq-g32-asym-act-order": (
        lambda p: ckpt.gptq_checkpoint(p, group_size=32, sym=False, desc_act=True), 2e-3),
    "awq-g32": (lambda p: ckpt.awq_checkpoint(p, group_size=32), 2e-3),
    "hf-fp8-block": (ckpt.hf_fp8_block, 0.1),
}


@pytest.fixture(scope="module", params=list(FORMATS))
def checkpoint(request, tmp_path_factory) -> tuple[str, ckpt.QuantCheckpoint, float]:
    writer, tolerance = FORMATS[request.param]
    return request.param, writer(tmp_path_factory.mktemp(request.param)), tolerance


def _generate(llm: LLM) -> list[tuple[list[int], list[float]]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY, use_tqdm=False)
    return [(o.outputs[0].token_ids, [lp.logprobs[0] for lp in o.outputs[0].logprobs])
            for o in outputs]


def _reference(path: Path, sequence: list[int]) -> torch.Tensor:
    asymmetric = (path / "model.safetensors").exists() and ckpt.quant_method(path) == \
        "compressed-tensors" and "asym" in path.name
    model = ckpt.hf_reference_model(path, dequantize=asymmetric)
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([sequence])).logits[0].float(), -1)


def _check_against_reference(name: str, made: ckpt.QuantCheckpoint, tolerance: float,
                             llm: LLM) -> None:
    assert llm.engine.core.info["quantization"] == ckpt.quant_method(made.path)
    worst, compared = 0.0, 0
    for prompt, (tokens, logprobs) in zip(PROMPTS, _generate(llm), strict=True):
        ref = _reference(made.path, prompt + tokens)
        for i, (token, logprob) in enumerate(zip(tokens, logprobs, strict=True)):
            row = ref[len(prompt) - 1 + i]
            top2 = row.topk(2).values
            if top2[0] - top2[1] >= TIE:
                assert int(row.argmax()) == token, (name, prompt, i)
                compared += 1
            worst = max(worst, abs(float(row[token]) - logprob))
    assert compared >= len(PROMPTS) * NEW_TOKENS // 2  # most positions are clear decisions
    assert worst < tolerance, f"{name}: log-probability off by {worst:.4f}"


def test_generates_like_the_reference(checkpoint):
    name, made, tolerance = checkpoint
    llm = LLM(str(made.path), dtype="float32", device="cpu", num_kv_blocks=64)
    _check_against_reference(name, made, tolerance, llm)


# Each rank cuts packed codes, group scales and zero points (AWQ's along the outputs, in
# words of 8) and per-channel scales; W8A8 ranks quantize their own part of the input.
TENSOR_PARALLEL = ("ct-fp8-channel", "ct-w4a16-g32-asym", "awq-g32")


@pytest.mark.parametrize("name", TENSOR_PARALLEL)
def test_tensor_parallel_ranks_load_their_parts(name, tmp_path):
    writer, tolerance = FORMATS[name]
    made = writer(tmp_path / name)
    llm = LLM(str(made.path), dtype="float32", device="cpu", num_kv_blocks=64,
              tensor_parallel_size=2)
    try:
        _check_against_reference(name, made, tolerance, llm)
    finally:
        llm.engine.shutdown()


def test_act_order_with_split_inputs_is_refused(tmp_path):
    made = ckpt.gptq_checkpoint(tmp_path / "gptq", group_size=16, desc_act=True)
    with pytest.raises(Exception, match=r"o_proj: act-order .* with the inputs split over "
                                        r"tensor-parallel ranks is not supported"):
        LLM(str(made.path), dtype="float32", device="cpu", num_kv_blocks=16,
            tensor_parallel_size=2)


def test_quantized_layers_hold_no_dense_weight(checkpoint):
    name, made, _ = checkpoint
    llm = LLM(str(made.path), dtype="float32", device="cpu", num_kv_blocks=16)
    model = llm.engine.core.executor.worker.model
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert not hasattr(qkv, "weight") and qkv.qweight is not None, name
    assert model.lm_head.weight.dtype == torch.float32  # the LM head stays dense
