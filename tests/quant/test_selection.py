"""Choosing a quantization method: the checkpoint's config, --quantization, the registry,
the platform's ops, the checkpoint format."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pagoda import LLM
from pagoda.ops import OpResolutionError
from pagoda.platforms import resolve_platform
from pagoda.quant import UnquantizedMethod
from pagoda.quant.compressed_tensors import CompressedTensorsMethod
from pagoda.quant.formats import Fp8Method, GptqMethod
from pagoda.quant.gguf import GGUFMethod
from pagoda.quant.selector import QuantMethodError, select_quant_method
from tests.engine.tiny_models import make_checkpoint, tiny_configs

GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}


def test_named_methods_and_none():
    cpu = resolve_platform("cpu")
    assert isinstance(select_quant_method(cpu, "gguf"), GGUFMethod)
    assert isinstance(select_quant_method(cpu, "fp8"), Fp8Method)
    assert isinstance(select_quant_method(cpu, None), UnquantizedMethod)
    assert isinstance(select_quant_method(cpu, "none"), UnquantizedMethod)


def test_the_checkpoint_config_decides():
    cpu = resolve_platform("cpu")
    config = SimpleNamespace(quantization_config=GPTQ)
    assert isinstance(select_quant_method(cpu, None, config), GptqMethod)
    assert isinstance(select_quant_method(cpu, "gptq", config), GptqMethod)
    with pytest.raises(QuantMethodError, match=r"quantized with 'gptq'.*'fp8' cannot load it"):
        select_quant_method(cpu, "fp8", config)
    ct = SimpleNamespace(quantization_config={"quant_method": "compressed-tensors",
                                              "format": "float-quantized", "config_groups": {
        "g": {"targets": ["Linear"], "weights": {"type": "float", "num_bits": 8,
                                                 "strategy": "channel", "symmetric": True},
              "input_activations": {"type": "float", "num_bits": 8, "strategy": "token",
                                    "dynamic": True, "symmetric": True}}}})
    assert isinstance(select_quant_method(cpu, None, ct), CompressedTensorsMethod)


@pytest.mark.parametrize(("config", "message"), [
    ({"quant_method": "bitsandbytes"}, r"Unknown quantization method 'bitsandbytes'.*gptq"),
    ({**GPTQ, "checkpoint_format": "marlin"}, r"gptq checkpoint_format 'marlin'"),
    ({"quant_method": "awq", "version": "gemv", "bits": 4}, r"awq version 'gemv'"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]},
     r"weight_block_size \[128, 128\] with static activations"),
    ({"quant_method": "compressed-tensors", "format": "naive-quantized", "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"type": "int", "num_bits": 4,
                                                       "strategy": "group", "group_size": 128}}}},
     r"config group 'group_0' \(format naive-quantized.*format 'naive-quantized' is not "
     r"supported for weight-only schemes"),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {
        "group_0": {"targets": ["Linear"],
                    "weights": {"type": "int", "num_bits": 8, "strategy": "channel"},
                    "input_activations": {"type": "int", "num_bits": 8, "strategy": "token",
                                          "dynamic": True, "symmetric": False}}}},
     r"asymmetric W8A8"),
])
def test_unsupported_configs_are_refused_naming_the_scheme(config, message):
    with pytest.raises(QuantMethodError, match=message):
        select_quant_method(resolve_platform("cpu"), None,
                            SimpleNamespace(quantization_config=config))


def test_a_platform_without_the_kernel_is_refused_naming_the_layer_and_who_can():
    with pytest.raises(OpResolutionError, match=(
            r"layer model\.layers\.0\.self_attn\.qkv_proj \(GGUF .*\) needs op 'woq_linear', "
            r"which platform 'template' does not offer .*platforms that offer it: .*cpu")):
        LLM("smollm2-135m-instruct", device="template", quantization="gguf_a8")


@pytest.mark.parametrize("method", ["gguf", "gguf_a8"])
def test_gguf_with_an_hf_checkpoint_is_refused(tmp_path, method):
    path = make_checkpoint(tmp_path / "llama", tiny_configs()["llama"])
    with pytest.raises(ValueError, match=rf"'{method}' reads gguf checkpoints only, not .*\(hf\)"):
        LLM(str(path), device="cpu", quantization=method)
    with pytest.raises(ValueError, match="not dummy weights"):
        LLM(str(path), device="cpu", quantization=method, load_format="dummy")
