"""Mixtral, Qwen2-MoE and Qwen3-MoE match HF transformers' logits through the paged cache
(the reference ops and the CPU's); MoE config features we do not implement, quantized
experts and malformed expert weights fail at load, naming what."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import MixtralConfig, PreTrainedModel, Qwen2MoeConfig, Qwen3MoeConfig

from pagoda.attention.reference import ReferenceAttentionBackend
from pagoda.distributed import TensorParallelGroup
from pagoda.models import load_model
from pagoda.models.layers import moe as moe_layers
from pagoda.models.layers.moe import FusedMoE, SparseMoeBlock
from pagoda.ops import OpTable, use_ops
from pagoda.quant import UnquantizedMethod
from tests.models.model_harness import (
    check_mixed_batch,
    check_prefill_then_decode,
    random_hf_model,
    save_checkpoint,
    tiny_config,
)

ATOL = RTOL = 1e-4
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)

CASES = {
    "mixtral": (MixtralConfig, dict(num_local_experts=6, num_experts_per_tok=2)),
    "qwen2_moe-shared-dense-layer": (Qwen2MoeConfig, dict(
        MOE, num_hidden_layers=3, shared_expert_intermediate_size=48, mlp_only_layers=[1],
        norm_topk_prob=False)),
    "qwen2_moe-sparse-step-2-norm": (Qwen2MoeConfig, dict(
        MOE, num_hidden_layers=3, shared_expert_intermediate_size=40, decoder_sparse_step=2,
        norm_topk_prob=True)),
    "qwen3_moe-norm": (Qwen3MoeConfig, dict(MOE, head_dim=24, norm_topk_prob=True,
                                            mlp_only_layers=[0])),
    "qwen3_moe-no-norm-top-3": (Qwen3MoeConfig, dict(MOE, num_experts_per_tok=3,
                                                     norm_topk_prob=False)),
}


@pytest.fixture(scope="module", params=list(CASES))
def checkpoint(request, tmp_path_factory) -> tuple[Path, PreTrainedModel]:
    cls, overrides = CASES[request.param]
    hf_model = random_hf_model(tiny_config(cls, **overrides))
    return save_checkpoint(hf_model, tmp_path_factory.mktemp(request.param)), hf_model


def _load(path: Path, table: OpTable, **kwargs) -> torch.nn.Module:
    with use_ops(table):
        return load_model(path, dtype=torch.float32, device=torch.device("cpu"),
                          attn_backend=ReferenceAttentionBackend, **kwargs)


@pytest.fixture(params=["reference", "cpu"])
def model(request, checkpoint) -> torch.nn.Module:
    table = OpTable("cpu") if request.param == "cpu" else OpTable.reference()
    return _load(checkpoint[0], table)



def test_sparse_layers_are_where_the_config_puts_them(checkpoint, model):
    hf_layers = checkpoint[1].model.layers
    ours = [isinstance(layer.mlp, SparseMoeBlock) for layer in model.model.layers]
    assert ours == ["Sparse" in type(layer.mlp).__name__ for layer in hf_layers]
    assert any(ours)


def test_prefill_then_decode_matches_hf(model, checkpoint):
    check_prefill_then_decode(model, checkpoint[1], atol=ATOL, rtol=RTOL)


def test_mixed_batch_matches_each_sequence_alone(model, checkpoint):
    check_mixed_batch(model, checkpoint[1], atol=ATOL, rtol=RTOL)


UNSUPPORTED = {
    "scoring_func": "sigmoid",
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 2.5,
    "topk_method": "noaux_tc",
}


@pytest.mark.parametrize(("field", "value"), list(UNSUPPORTED.items()))
def test_routing_we_do_not_implement_fails_at_load_naming_the_field(field, value, tmp_path):
    config = tiny_config(Qwen3MoeConfig, **MOE)
    setattr(config, field, value)
    path = save_checkpoint(random_hf_model(tiny_config(Qwen3MoeConfig, **MOE)), tmp_path)
    config.save_pretrained(path)
    with pytest.raises(ValueError, match=rf"Unsupported MoE config {field}={value!r}"):
        _load(path, OpTable.reference())


def test_quantized_experts_fail_at_load(tmp_path):
    class Int8Like(UnquantizedMethod):
        name = "int8"

    path = save_checkpoint(random_hf_model(tiny_config(Qwen3MoeConfig, **MOE)), tmp_path)
    with pytest.raises(ValueError, match=r"model.layers.0.mlp: mixture-of-experts layers take "
                                         r"unquantized weights only, not quantization 'int8'"):
        _load(path, OpTable.reference(), quant_method=Int8Like())


def _rewrite(path: Path, edit) -> None:
    (file,) = path.glob("*.safetensors")
    tensors = load_file(file)
    edit(tensors)
    save_file(tensors, file, metadata={"format": "pt"})


def test_a_missing_expert_is_named(tmp_path):
    path = save_checkpoint(random_hf_model(tiny_config(Qwen3MoeConfig, **MOE)), tmp_path)
    _rewrite(path, lambda t: t.pop("model.layers.1.mlp.experts.5.up_proj.weight"))
    with pytest.raises(ValueError, match=r"Missing weights .*model.layers.1.mlp.experts.5."
                                         r"up_proj.weight"):
        _load(path, OpTable.reference())


def test_an_expert_of_the_wrong_shape_is_named(tmp_path):
    path = save_checkpoint(random_hf_model(tiny_config(Qwen3MoeConfig, **MOE)), tmp_path)
    name = "model.layers.0.mlp.experts.2.down_proj.weight"
    _rewrite(path, lambda t: t.update({name: t[name][:, :16].contiguous()}))
    with pytest.raises(ValueError, match=rf"Weight '{name}' has shape \(64, 16\), the model "
                                         rf"expects \(64, 32\)"):
        _load(path, OpTable.reference())


@pytest.mark.parametrize(("experts", "inter", "expert_parallel", "message"), [
    (7, 32, True, r"7 experts do not split evenly over tensor_parallel_size 2 "
                  r"\(enable_expert_parallel\)"),
    (8, 30, False, r"experts' intermediate size: 30 does not split evenly over "
                   r"tensor_parallel_size 4"),
])
def test_experts_that_do_not_split_over_the_ranks_are_refused(
        experts, inter, expert_parallel, message, monkeypatch):
    ranks = 2 if expert_parallel else 4
    monkeypatch.setattr(moe_layers, "tp_group", lambda: TensorParallelGroup(
        1, ranks, None, expert_parallel=expert_parallel))
    with pytest.raises(ValueError, match=message):
        FusedMoE(experts, 64, inter, dtype=torch.float32)
