"""The tiny quantized checkpoints of tests.quant.checkpoints are what they claim to be,
checked without Pagoda: by compressed-tensors' own decompression, by an unpacker written
here from the documented GPTQ/AWQ layouts, and by HF transformers' loading."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("compressed_tensors")

from tests.quant import checkpoints as ck  # noqa: E402

FP8_MAX = 448.0
PROMPT = torch.tensor([[1, 17, 200, 33, 4, 91, 150, 6, 255, 42, 8, 77]])

# name -> (writer, the compressed-tensors format, the tensors each linear has beyond biases)
CT = {
    "fp8_dynamic": (ck.ct_fp8_dynamic, "float-quantized", {"weight", "weight_scale"}),
    "fp8_per_tensor": (lambda p: ck.ct_fp8_dynamic(p, per_tensor=True), "float-quantized",
                       {"weight", "weight_scale"}),
    "fp8_static": (ck.ct_fp8_static, "float-quantized",
                   {"weight", "weight_scale", "input_scale"}),
    "fp8_block": (ck.ct_fp8_block, "float-quantized", {"weight", "weight_scale"}),
    "fp8_kv": (ck.ct_fp8_kv_cache, "float-quantized", {"weight", "weight_scale"}),
    "int8": (ck.ct_int8_w8a8, "int-quantized", {"weight", "weight_scale"}),
    "w4a16_g128": (ck.ct_w4a16, "pack-quantized",
                   {"weight_packed", "weight_scale", "weight_shape"}),
    "w4a16_g32_asym": (lambda p: ck.ct_w4a16(p, group_size=32, symmetric=False),
                       "pack-quantized",
                       {"weight_packed", "weight_scale", "weight_shape", "weight_zero_point"}),
    "w4a16_g32_bf16": (lambda p: ck.ct_w4a16(p, group_size=32, dtype=torch.bfloat16),
                       "pack-quantized", {"weight_packed", "weight_scale", "weight_shape"}),
}
INT4 = {
    "gptq_g128_sym": lambda p: ck.gptq_checkpoint(p),
    "gptq_g32_asym": lambda p: ck.gptq_checkpoint(p, group_size=32, sym=False),
    "gptq_g32_desc_act": lambda p: ck.gptq_checkpoint(p, group_size=32, desc_act=True),
    "gptq_g32_asym_desc_act": lambda p: ck.gptq_checkpoint(p, group_size=32, sym=False,
                                                           desc_act=True),
    "awq_g32": lambda p: ck.awq_checkpoint(p, group_size=32),
    "awq_g128": lambda p: ck.awq_checkpoint(p),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            writer = {**{k: v[0] for k, v in CT.items()}, **INT4, "hf_fp8": ck.hf_fp8_block}[name]
            cache[name] = writer(tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def _config(path):
    return json.loads((path / "config.json").read_text())


def _split(tensors, name):
    prefix = name + "."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def _logits(model):
    with torch.no_grad():
        return model(PROMPT).logits[0].float()


def _dense_model(state, path):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(state)
    return model


def _dense_logits(state, path):
    return _logits(_dense_model(state, path))


def _within_quant_error(deq, dense, scale, fmt, rel=0.0):
    """|deq - dense| is at most half a step of the format (scale broadcast to [N, K]), plus
    `rel` * |dense| (bfloat16 models quantize and dequantize in bfloat16)."""
    err = (deq - dense).abs()
    if fmt == "float-quantized":  # e4m3: 3 mantissa bits, subnormal step 2**-9 * scale
        bound = dense.abs() * 2.0**-4 + scale * 2.0**-9
    else:
        bound = 0.5 * scale * 1.01
    return bool((err <= bound + rel * dense.abs() + 1e-7).all())


def _broadcast_scale(scale, shape):
    n, k = shape
    scale = scale.float()
    if scale.numel() == 1:
        return scale.reshape(1, 1).expand(n, k)
    rows = -(-n // scale.shape[0])
    cols = -(-k // scale.shape[1])
    return scale.repeat_interleave(rows, 0)[:n].repeat_interleave(cols, 1)[:, :k]


# --------------------------------------------------------------------------------------------
# compressed-tensors


@pytest.mark.parametrize("name", list(CT))
def test_compressed_tensors_checkpoint_decompresses_to_its_weights(written, name):
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    _, fmt, names = CT[name]
    c = written(name)
    qconfig = _config(c.path)["quantization_config"]
    assert qconfig["quant_method"] == "compressed-tensors" and qconfig["format"] == fmt
    assert qconfig["quantization_status"] == "compressed" and qconfig["ignore"] == ["lm_head"]
    config = QuantizationConfig.model_validate(qconfig)
    (scheme,) = config.config_groups.values()
    compressor = BaseCompressor.get_value_from_registry(fmt)
    tensors = load_file(str(c.path / "model.safetensors"))
    assert tensors["lm_head.weight"].dtype == torch.float32 or name.endswith("bf16")
    assert len(c.quantized) == 14
    for module in c.quantized:
        local = _split(tensors, module)
        assert set(local) == names, (module, set(local))
        # decompressed with float32 scales: exactly the values the writer says, and within
        # half a step of the dense weight
        float_scales = {k: v.float() if k.endswith("_scale") else v for k, v in local.items()}
        weight = compressor.decompress(float_scales, scheme)["weight"].float()
        assert torch.equal(weight, c.dequantized[f"{module}.weight"]), module
        dense = c.dense[f"{module}.weight"]
        assert weight.shape == dense.shape
        scale = _broadcast_scale(local["weight_scale"], dense.shape)
        rel = 2.0**-7 if name.endswith("bf16") else 0.0
        assert _within_quant_error(weight, dense, scale, fmt, rel), module
    for key, value in c.dense.items():  # everything else is stored as it was
        if key.rsplit(".", 1)[0] not in c.quantized:
            assert torch.equal(tensors[key].float(), value), key


def test_compressed_tensors_tensor_layouts(written):
    t = load_file(str(written("fp8_dynamic").path / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj"
    assert t[f"{q}.weight"].dtype == torch.float8_e4m3fn and t[f"{q}.weight"].shape == (64, 64)
    assert t[f"{q}.weight_scale"].shape == (64, 1)
    t = load_file(str(written("fp8_per_tensor").path / "model.safetensors"))
    assert t[f"{q}.weight_scale"].shape == (1,)
    t = load_file(str(written("fp8_block").path / "model.safetensors"))
    assert t[f"{q}.weight_scale"].shape == (2, 1)  # WIDE q_proj: [256, 128]
    t = load_file(str(written("int8").path / "model.safetensors"))
    assert t[f"{q}.weight"].dtype == torch.int8 and t[f"{q}.weight_scale"].shape == (64, 1)
    t = load_file(str(written("w4a16_g128").path / "model.safetensors"))
    d = "model.layers.1.mlp.down_proj"  # WIDE: [128, 256]
    assert t[f"{d}.weight_packed"].shape == (128, 32)
    assert t[f"{d}.weight_packed"].dtype == torch.int32
    assert t[f"{d}.weight_scale"].shape == (128, 2)
    assert t[f"{d}.weight_shape"].tolist() == [128, 256]
    t = load_file(str(written("w4a16_g32_asym").path / "model.safetensors"))
    d = "model.layers.1.mlp.down_proj"  # SMALL: [64, 128]
    assert t[f"{d}.weight_zero_point"].shape == (8, 4)  # packed along the outputs
    assert t[f"{d}.weight_zero_point"].dtype == torch.int32
    assert t[f"{d}.weight_scale"].dtype == torch.float32
    t = load_file(str(written("w4a16_g32_bf16").path / "model.safetensors"))
    assert t[f"{d}.weight_scale"].dtype == torch.bfloat16


def _observed_amax(c):
    """amax |input| of each quantized linear and of each layer's post-rope keys and values
    of the dense model before quantization, on calibration_prompts()."""
    model = _dense_model(c.dense, c.path)
    amax = {}
    hooks = [model.get_submodule(m).register_forward_pre_hook(
        lambda mod, args, m=m: amax.__setitem__(m, args[0].abs().max())) for m in c.quantized]
    with torch.no_grad():
        cache = model(ck.calibration_prompts(), use_cache=True).cache
    for h in hooks:
        h.remove()
    for i, layer in enumerate(cache.layers):
        amax[f"model.layers.{i}.self_attn.k"] = layer.keys.abs().max()
        amax[f"model.layers.{i}.self_attn.v"] = layer.values.abs().max()
    return amax


def test_static_input_scales_are_calibrated_amax(written):
    c = written("fp8_static")
    tensors = load_file(str(c.path / "model.safetensors"))
    amax = _observed_amax(c)
    for module in c.quantized:
        assert tensors[f"{module}.input_scale"].shape == (1,)
        torch.testing.assert_close(tensors[f"{module}.input_scale"][0], amax[module] / FP8_MAX)
    scheme = _config(c.path)["quantization_config"]["config_groups"]["group_0"]
    assert scheme["input_activations"]["dynamic"] is False
    assert scheme["input_activations"]["strategy"] == "tensor"


def test_kv_cache_scales_are_calibrated_amax(written):
    c = written("fp8_kv")
    qconfig = _config(c.path)["quantization_config"]
    kv = qconfig["kv_cache_scheme"]
    assert (kv["type"], kv["num_bits"], kv["strategy"], kv["dynamic"]) == (
        "float", 8, "tensor", False)
    tensors = load_file(str(c.path / "model.safetensors"))
    amax = _observed_amax(c)
    for i in range(2):
        for kind in "kv":
            scale = tensors[f"model.layers.{i}.self_attn.{kind}_scale"]
            assert scale.shape == (1,) and scale.dtype == torch.float32
            torch.testing.assert_close(scale[0], amax[f"model.layers.{i}.self_attn.{kind}"]
                                       / FP8_MAX)


# --------------------------------------------------------------------------------------------
# GPTQ and AWQ: an unpacker from the documented layouts, independent of the writer's


def _nibbles(words: torch.Tensor, dim: int) -> torch.Tensor:
    """The eight 4-bit fields of each int32, low nibble first, expanded along `dim`."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    w = words.unsqueeze(-1) >> shifts & 0xF  # [..., 8]
    if dim == 0:
        return w.permute(0, 2, 1).reshape(-1, words.shape[1])
    return w.reshape(words.shape[0], -1)


def _unpack(tensors, module, method):
    """(dequantized [N, K] float32, per-input group index [K]) of a GPTQ v1 / AWQ linear."""
    scales = tensors[f"{module}.scales"].float()  # [G, N]
    if method == "gptq":
        q = _nibbles(tensors[f"{module}.qweight"], dim=0)  # [K, N]
        z = _nibbles(tensors[f"{module}.qzeros"], dim=1) + 1  # stored zero - 1
        g = tensors[f"{module}.g_idx"].long()
    else:
        order = [0, 4, 1, 5, 2, 6, 3, 7]  # output 8c + j is in nibble order[j]
        q = _nibbles(tensors[f"{module}.qweight"], dim=1)
        z = _nibbles(tensors[f"{module}.qzeros"], dim=1)
        q = q.view(q.shape[0], -1, 8)[:, :, order].flatten(1)
        z = z.view(z.shape[0], -1, 8)[:, :, order].flatten(1)
        g = torch.arange(q.shape[0]) // (q.shape[0] // scales.shape[0])
    return ((q - z[g]).float() * scales[g]).t(), g


@pytest.mark.parametrize("name", list(INT4))
def test_gptq_awq_unpack_to_compressed_tensors_decompression(written, name):
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor

    c = written(name)
    method = "gptq" if name.startswith("gptq") else "awq"
    qconfig = _config(c.path)["quantization_config"]
    assert qconfig["quant_method"] == method and qconfig["bits"] == 4
    group = qconfig["group_size"]
    tensors = load_file(str(c.path / "model.safetensors"))
    fallback = load_file(str(ck.dequantized_checkpoint(c.path) / "model.safetensors"))
    for module in c.quantized:
        local = _split(tensors, module)
        n, k = c.dense[f"{module}.weight"].shape
        groups = k // group
        assert local["scales"].dtype == torch.float16 and local["scales"].shape == (groups, n)
        assert local["qzeros"].dtype == torch.int32 and local["qzeros"].shape == (groups, n // 8)
        if method == "gptq":
            assert set(local) == {"qweight", "qzeros", "scales", "g_idx"}
            assert local["qweight"].shape == (k // 8, n) and local["g_idx"].dtype == torch.int32
            # symmetric: every stored zero is 8 - 1
            assert (local["qzeros"] == 0x77777777).all().item() == qconfig["sym"]
        else:
            assert set(local) == {"qweight", "qzeros", "scales"}
            assert local["qweight"].shape == (k, n // 8)
        weight, g = _unpack(tensors, module, method)
        assert torch.bincount(g).tolist() == [group] * groups
        assert bool((g.diff() < 0).any()) == qconfig.get("desc_act", False)
        state, scheme = c.ct_reference[module]
        ct_weight = PackedQuantizationCompressor.decompress(state, scheme)["weight"].float()
        perm = c.perm.get(module, torch.arange(k))
        # compressed-tensors holds the inputs in group order: perm[i] is its input i
        assert torch.equal(weight[:, perm], ct_weight), module
        assert torch.equal(weight, c.dequantized[f"{module}.weight"]), module
        assert torch.equal(weight, fallback[f"{module}.weight"]), module
        scale = local["scales"].float()[g].t()
        assert _within_quant_error(weight, c.dense[f"{module}.weight"], scale, "int"), module


# --------------------------------------------------------------------------------------------
# HF fine-grained FP8


def test_hf_fp8_block_layout(written):
    c = written("hf_fp8")
    qconfig = _config(c.path)["quantization_config"]
    assert qconfig["quant_method"] == "fp8" and qconfig["weight_block_size"] == [128, 128]
    assert qconfig["activation_scheme"] == "dynamic"
    tensors = load_file(str(c.path / "model.safetensors"))
    for module in c.quantized:
        w, s = tensors[f"{module}.weight"], tensors[f"{module}.weight_scale_inv"]
        n, k = w.shape
        assert w.dtype == torch.float8_e4m3fn
        assert s.dtype == torch.float32 and s.shape == (-(-n // 128), -(-k // 128))
        weight = w.float() * _broadcast_scale(s, (n, k))
        assert torch.equal(weight, c.dequantized[f"{module}.weight"]), module
        dense = c.dense[f"{module}.weight"]
        assert _within_quant_error(weight, dense, _broadcast_scale(s, (n, k)), "float-quantized")


# --------------------------------------------------------------------------------------------
# what HF transformers loads, and its logits


# max |logits - dense logits| / max |dense logits| allowed for the quantized model
LOGIT_TOLERANCE = {"float-quantized": 0.1, "int-quantized": 0.03, "pack-quantized": 0.3}


@pytest.mark.parametrize("name", list(CT))
def test_hf_loads_compressed_tensors(written, name):
    c = written(name)
    dequantized = _dense_logits(c.dequantized, c.path)
    # dequantize=True: a dense model of exactly the dequantized weights (dequantized in
    # bfloat16 when that is the checkpoint's dtype)
    expected = dequantized
    if name.endswith("bf16"):
        rounded = {k: v.bfloat16().float() for k, v in c.dequantized.items()}
        expected = _dense_logits(rounded, c.path)
    got = _logits(ck.hf_reference_model(c.path, dequantize=True))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    dense = _dense_logits(c.dense, c.path)
    tolerance = LOGIT_TOLERANCE[CT[name][1]]
    assert (dequantized - dense).abs().max() <= tolerance * dense.abs().max()
    if name == "w4a16_g32_asym":
        # compressed-tensors 0.20.1 in transformers 5.24 expects an unpacked [N, G] zero
        # point when it builds the compressed model, and refuses the packed [N/8, G] one.
        with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
            ck.hf_reference_model(c.path)
        return
    # default: the scheme's fake quantization (activations too) on the same weights
    fake = _logits(ck.hf_reference_model(c.path))
    assert (fake - dense).abs().max() <= tolerance * dense.abs().max()
    if CT[name][1] == "pack-quantized":  # weight-only: nothing else is quantized
        torch.testing.assert_close(fake, dequantized, rtol=1e-4, atol=1e-5)
    else:
        assert not torch.equal(fake, dequantized)


def test_hf_loads_fine_grained_fp8_dequantized_on_cpu(written):
    c = written("hf_fp8")
    model = ck.hf_reference_model(c.path)
    for module in c.quantized:
        weight = model.get_submodule(module).weight
        assert weight.dtype == torch.float32
        assert torch.equal(weight, c.dequantized[f"{module}.weight"]), module
    torch.testing.assert_close(_logits(model), _dense_logits(c.dequantized, c.path),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["gptq_g32_desc_act", "awq_g32"])
def test_hf_cannot_load_gptq_awq_so_the_reference_is_dequantized(written, name):
    from transformers import AutoModelForCausalLM

    c = written(name)
    with pytest.raises(ImportError, match="optimum|gptqmodel"):
        AutoModelForCausalLM.from_pretrained(c.path, dtype=torch.float32)
    dequantized = _dense_logits(c.dequantized, c.path)
    torch.testing.assert_close(_logits(ck.hf_reference_model(c.path)), dequantized,
                               rtol=1e-4, atol=1e-5)
    dense = _dense_logits(c.dense, c.path)
    assert (dequantized - dense).abs().max() <= 0.3 * dense.abs().max()
