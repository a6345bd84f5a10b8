"""Tiny random quantized Llama checkpoints, written in the test run by the formats' own tools.

Every writer builds a random 2-layer GQA Llama (tests.engine.tiny_models' vocabulary and
word-level tokenizer), quantizes its seven linears per layer (q/k/v/o, gate/up/down; the
embedding, norms and lm_head stay dense) and saves config.json (with `quantization_config`),
model.safetensors and the tokenizer into a directory. Each returns a `QuantCheckpoint`: the
path, the model's float32 state dict before quantization (`dense`) and the same state dict
with every quantized weight replaced by its dequantized float32 values (`dequantized`, what
"our unquantized path" on the same checkpoint must compute with).

Two model shapes: `SMALL` (hidden 64, intermediate 128, 4 heads of 16, 2 kv heads) and
`WIDE` (hidden 128, intermediate 256, 4 heads of 64, 2 kv heads), whose every linear has
both dimensions a multiple of 128 (128-groups, 128x128 blocks).

Which library writes what
-------------------------
compressed-tensors (0.20.1; llmcompressor is not installable next to transformers 5.24, it
pins transformers<=5.17 and compressed-tensors==0.19.0). Its own lifecycle, without
llmcompressor: `apply_quantization_config` (a `QuantizationConfig` of preset schemes from
`preset_name_to_scheme`: FP8_DYNAMIC, FP8, FP8_BLOCK, W8A8, W4A16, W4A16_ASYM, or a scheme
of our own), weight qparams by `calculate_qparams` on the weight's min/max per strategy (the
memoryless min-max that llmcompressor's default observer computes), static input scales by
the same function on min/max observed (forward pre-hooks) over a few random prompts, then
`ModelCompressor.from_pretrained_model` -> `compress_model` -> `save_pretrained` ->
`update_config`, the order ModelCompressor's docstring gives. The KV cache is the exception:
compressed-tensors 0.20.1 recognizes an attention module by a `past_key_values` argument,
and transformers 5.24's attention takes `cache`, so `kv_cache_scheme` quietly quantizes
nothing. The k/v scales are therefore `calculate_qparams` of the post-rope keys and the
values that the calibration forward leaves in transformers' cache, attached as
`self_attn.k_scale`/`v_scale` (the names and [1] shape compressed-tensors gives them), with
`kv_cache_scheme` set in the config.

GPTQ and AWQ: nothing installable here packs them on the CPU (gptqmodel 7.x needs
torch>=2.14.1 and older sdists fail to build under pip's isolation; auto-gptq 0.7.1 is a
CUDA wheel with heavy dependencies; autoawq 0.2.9 is archived and its package import needs
`datasets`; transformers' GPTQ/AWQ quantizers need gptqmodel/optimum). So their codes come
from compressed-tensors: its W4A16 scheme's qparams (scales rounded to float16, as both
formats store them) and `PackedQuantizationCompressor.compress` (its `quantize` and
`pack_to_int32`). The GPTQ/AWQ tensors are then repacked from those codes with
`unpack_from_int32`/`pack_to_int32`, plus the permutations below. The compressed-tensors
form of the same weight is kept in `QuantCheckpoint.ct_reference`, so tests can decompress
it with compressed-tensors and compare.

HF fine-grained FP8: `FineGrainedFP8Config` cannot quantize on the CPU (its quantizer's
`validate_environment` raises "No GPU or XPU found"), so the weights are quantized by the
same code it would run, transformers' `Fp8Quantize` conversion op, and the config is
`FineGrainedFP8Config().to_dict()`.

Layout facts relied on (and where they were read)
--------------------------------------------------
* compressed-tensors `pack_to_int32(v, 4)` (compressors/pack_quantized/helpers.py): int8
  values v in [-8, 7] are stored as v + 8; element j of a packed row sits at bit 4*j of the
  row's bit string, i.e. word j // 8, bits 4*(j % 8) (the low nibble first). With
  packed_dim=0 the columns are packed instead of the rows.
* compressed-tensors pack-quantized (compressors/pack_quantized/base.py): weight_packed
  int32 [N, K/8], weight_scale [N, K/group] (the model's dtype), weight_shape int64 [2],
  and, asymmetric only, weight_zero_point int32 [N/8, K/group] packed along dim 0, holding
  zero points in [-8, 7]; w = (q - z) * scale. compressed-tensors 0.20.1 removed
  actorder="group" (quant_args.py: "has been removed"), so it writes no `weight_g_idx`.
* compressed-tensors float-/int-quantized (compressors/naive_quantized/base.py): `weight`
  float8_e4m3fn / int8 [N, K], weight_scale [N, 1] (channel), [1] (tensor) or
  [ceil(N/bn), K/bk] (block), input_scale [1] for static activations; kv_cache_scheme puts
  `self_attn.k_scale` and `self_attn.v_scale` ([1]) in the checkpoint
  (quantization/lifecycle/initialize.py, initialize_attn_qparams).
* GPTQ, the v1 checkpoint format (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, `pack`
  and its buffers): qweight int32 [K/8, N], nibble i (bits 4i..4i+3) of qweight[r, n] is
  the 4-bit code of input r*8+i; qzeros int32 [G, N/8], nibble i of qzeros[g, c] is
  zero-1 of output c*8+i (the "zeros -= 1" before packing); scales float16 [G, N]; g_idx
  int32 [K], the group of each input (k // group_size without act-order). Codes and zeros
  are unsigned 0..15 and w[n, k] = (q[k, n] - (qzeros + 1)[g_idx[k], n]) * scales[g_idx[k], n];
  symmetric means zero = 8 (qzeros nibbles all 7). With desc_act the groups are formed in a
  permuted input order perm: g_idx[perm[i]] = i // group_size, qweight stays in the
  original input order.
* AWQ GEMM (autoawq's awq/modules/linear/gemm.py, `WQLinear_GEMM.from_linear`): qweight
  int32 [K, N/8] packed along the outputs, nibble i of word c holding output
  c*8 + [0, 2, 4, 6, 1, 3, 5, 7][i]; qzeros int32 [G, N/8] in the same order, holding the
  plain zero point (no -1); scales float16 [G, N]; w = (q - zero) * scale. AWQ's config
  (as AutoAWQ writes it): quant_method "awq", bits, group_size, zero_point, version "gemm".
* HF fine-grained FP8 (transformers/integrations/finegrained_fp8.py, `FP8Linear`,
  `Fp8Quantize`): weight float8_e4m3fn [N, K], weight_scale_inv float32
  [ceil(N/bn), ceil(K/bk)], w = weight * weight_scale_inv per (bn, bk) block; config
  quant_method "fp8", activation_scheme, weight_block_size [bn, bk]. `Fp8Quantize` leaves a
  weight whose shape the block does not divide unquantized, hence `WIDE`.

Reference loading (transformers 5.24, this CPU): see `hf_reference_model`.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig

from tests.engine.tiny_models import VOCAB, save_tokenizer

SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16)
WIDE = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64)
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""Nibble i of an AWQ word holds output 8c + AWQ_ORDER[i]."""


@dataclass
class QuantCheckpoint:
    path: Path
    dense: dict[str, torch.Tensor]
    """The float32 state dict of the model before quantization."""
    dequantized: dict[str, torch.Tensor]
    """`dense` with each quantized weight replaced by its dequantized float32 values."""
    quantized: list[str]
    """Names of the quantized linear modules (`model.layers.0.self_attn.q_proj`, ...)."""
    ct_reference: dict[str, tuple[dict[str, torch.Tensor], object]] = field(default_factory=dict)
    """GPTQ/AWQ: per module, the compressed-tensors pack-quantized state dict and
    QuantizationScheme holding the same codes (inputs in `perm` order for desc_act)."""
    perm: dict[str, torch.Tensor] = field(default_factory=dict)
    """GPTQ desc_act: per module, the input order the groups were formed in."""


def tiny_llama_config(shape: dict | None = None) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=512, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False, rope_theta=10000.0, **(shape or SMALL))


def _random_model(shape: dict | None, dtype: torch.dtype, seed: int):
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_llama_config(shape), dtype=dtype).eval()


def _float32(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in state.items()}


def _linear_names(model) -> list[str]:
    return [f"model.layers.{i}.{n}" for i in range(model.config.num_hidden_layers)
            for n in LINEARS]


def calibration_prompts(seed: int = 1, batch: int = 4, length: int = 16) -> torch.Tensor:
    """Random token ids [batch, length] (no special tokens) used to calibrate static scales."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g)


# --------------------------------------------------------------------------------------------
# compressed-tensors


def _weight_minmax(w: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """min and max of w [N, K] over each quantization unit of `args.strategy`, shaped as the
    scale compressed-tensors initializes for it."""
    w = w.float()
    strategy = args.strategy
    if strategy == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if strategy == "channel":
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if strategy == "group":
        groups = w.unflatten(-1, (-1, args.group_size))
        return groups.amin(-1), groups.amax(-1)
    if strategy == "block":
        bn, bk = args.block_structure
        n, k = w.shape
        padded = torch.nn.functional.pad(w, (0, -k % bk, 0, -n % bn))
        tiles = padded.unflatten(1, (-1, bk)).unflatten(0, (-1, bn))
        # Padding zeros never change a min-max clamped to include 0.
        return tiles.amin(dim=(1, 3)), tiles.amax(dim=(1, 3))
    raise ValueError(f"no weight min-max for strategy {strategy}")


def _set_qparams(module, base: str, lo: torch.Tensor, hi: torch.Tensor, args) -> None:
    from compressed_tensors.offload import update_offload_parameter
    from compressed_tensors.quantization.utils import calculate_qparams

    scale, zero_point = calculate_qparams(lo, hi, args)
    update_offload_parameter(module, f"{base}_scale", scale.to(getattr(module, f"{base}_scale").dtype))
    if hasattr(module, f"{base}_zero_point"):
        zp = getattr(module, f"{base}_zero_point")
        update_offload_parameter(module, f"{base}_zero_point", zero_point.to(zp.dtype))


def _calibrate(model, prompts: torch.Tensor, kv_args=None) -> None:
    """Static input scales (per tensor) from min-max over `prompts`, observed by forward
    pre-hooks with quantization disabled (the dense model's activations); with `kv_args`,
    also each attention's k_scale and v_scale from the post-rope keys and the values the
    forward leaves in transformers' cache."""
    observed: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def record(module, inputs) -> None:
        x = inputs[0].detach().float()
        lo, hi = x.amin().reshape(1), x.amax().reshape(1)
        if id(module) in observed:
            lo = torch.minimum(lo, observed[id(module)][0])
            hi = torch.maximum(hi, observed[id(module)][1])
        observed[id(module)] = (lo, hi)

    handles, static = [], []
    for module in model.modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None:
            continue
        module.quantization_enabled = False
        args = scheme.input_activations
        if args is not None and not args.dynamic:
            handles.append(module.register_forward_pre_hook(record))
            static.append((module, args))
    with torch.no_grad():
        cache = model(prompts, use_cache=kv_args is not None).get("cache")
    for handle in handles:
        handle.remove()
    for module in model.modules():
        if hasattr(module, "quantization_enabled"):
            del module.quantization_enabled
    for module, args in static:
        _set_qparams(module, "input", *observed[id(module)], args)
    if kv_args is None:
        return
    from compressed_tensors.quantization.utils import calculate_qparams

    for layer, decoder in zip(cache.layers, model.model.layers):
        attn = decoder.self_attn
        dtype = attn.o_proj.weight.dtype  # compressed-tensors' scales take the model's dtype
        for base, states in (("k", layer.keys), ("v", layer.values)):
            states = states.float()
            scale, _ = calculate_qparams(states.amin().reshape(1), states.amax().reshape(1),
                                         kv_args)
            attn.register_parameter(f"{base}_scale", torch.nn.Parameter(
                scale.to(dtype), requires_grad=False))


def _ct_checkpoint(path: Path, groups: dict, *, kv_cache_scheme=None, shape: dict | None = None,
                   dtype: torch.dtype = torch.float32, seed: int = 0) -> QuantCheckpoint:
    """Quantize a random tiny Llama with compressed-tensors `groups` ({name: scheme}) applied
    to every Linear but lm_head, and save it compressed."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationConfig,
        QuantizationStatus,
        apply_quantization_config,
    )

    path = Path(path)
    model = _random_model(shape, dtype, seed)
    dense = _float32(model.state_dict())
    config = QuantizationConfig(config_groups=groups, ignore=["lm_head"])
    apply_quantization_config(model, config, show_progress=False)

    quantized = []
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None or scheme.weights is None:
            continue
        _set_qparams(module, "weight", *_weight_minmax(module.weight, scheme.weights),
                     scheme.weights)
        quantized.append(name)
    if config.requires_calibration_data() or kv_cache_scheme is not None:
        _calibrate(model, calibration_prompts(), kv_cache_scheme)
    for module in model.modules():
        if hasattr(module, "quantization_scheme"):
            module.quantization_status = QuantizationStatus.FROZEN

    compressor = ModelCompressor.from_pretrained_model(model)
    if kv_cache_scheme is not None:
        compressor.quantization_config.kv_cache_scheme = kv_cache_scheme
    compressor.compress_model(model)
    model.save_pretrained(path)
    compressor.update_config(path)
    dequantized = dict(dense)
    for name in quantized:
        module = model.get_submodule(name)
        dequantized[f"{name}.weight"] = ct_decompress(
            dict(module.state_dict()), module.quantization_scheme)
    save_tokenizer(path)
    return QuantCheckpoint(path, dense, dequantized, quantized)


def ct_decompress(local: dict[str, torch.Tensor], scheme) -> torch.Tensor:
    """float32 [N, K] of one compressed linear (its tensors by local name) by
    compressed-tensors' decompressor of `scheme.format`, with float32 scales: the exact
    values the stored numbers stand for (a bfloat16 model's decompression would round)."""
    from compressed_tensors.compressors import BaseCompressor

    local = {k: v.float() if k.endswith("_scale") else v for k, v in local.items()}
    compressor = BaseCompressor.get_value_from_registry(scheme.format)
    return compressor.decompress(local, scheme)["weight"].float()


def _preset(name: str, **weights):
    from compressed_tensors.quantization import preset_name_to_scheme

    scheme = preset_name_to_scheme(name, ["Linear"])
    if weights:
        scheme.weights = scheme.weights.model_copy(update=weights)
    return scheme


def ct_fp8_dynamic(path: Path, *, per_tensor: bool = False, **kw) -> QuantCheckpoint:
    """compressed-tensors `float-quantized`: FP8 weights with a scale per output channel
    (preset FP8_DYNAMIC; `per_tensor`: one scale per weight), activations dynamic per token.
    Per linear: weight float8_e4m3fn [N, K], weight_scale [N, 1] ([1] per tensor)."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    scheme = _preset("FP8_DYNAMIC")
    if per_tensor:
        scheme = QuantizationScheme(
            targets=["Linear"], input_activations=scheme.input_activations,
            weights=QuantizationArgs(num_bits=8, type="float", strategy="tensor",
                                     symmetric=True, dynamic=False))
    return _ct_checkpoint(path, {"group_0": scheme}, **kw)


def ct_fp8_static(path: Path, **kw) -> QuantCheckpoint:
    """compressed-tensors `float-quantized`, preset FP8: per-tensor FP8 weights and a static
    per-tensor FP8 input scale calibrated on `calibration_prompts()`. Per linear: weight
    float8_e4m3fn [N, K], weight_scale [1], input_scale [1]."""
    return _ct_checkpoint(path, {"group_0": _preset("FP8")}, **kw)


def ct_fp8_block(path: Path, **kw) -> QuantCheckpoint:
    """compressed-tensors `float-quantized`, preset FP8_BLOCK (WIDE shape): 128x128-block
    weight scales, activations dynamic per token and group of 128. Per linear: weight
    float8_e4m3fn [N, K], weight_scale [N/128, K/128]."""
    return _ct_checkpoint(path, {"group_0": _preset("FP8_BLOCK")}, **{"shape": WIDE, **kw})


def ct_fp8_kv_cache(path: Path, **kw) -> QuantCheckpoint:
    """FP8_DYNAMIC linears plus `kv_cache_scheme` (FP8, static per tensor): each layer's
    self_attn.k_scale and self_attn.v_scale ([1]) calibrated on the post-rope keys and the
    values of `calibration_prompts()`."""
    from compressed_tensors.quantization import QuantizationArgs

    kv = QuantizationArgs(num_bits=8, type="float", strategy="tensor", symmetric=True,
                          dynamic=False)
    return _ct_checkpoint(path, {"group_0": _preset("FP8_DYNAMIC")}, kv_cache_scheme=kv, **kw)


def ct_int8_w8a8(path: Path, **kw) -> QuantCheckpoint:
    """compressed-tensors `int-quantized`, preset W8A8: int8 weights with a symmetric scale
    per output channel, int8 activations dynamic per token. Per linear: weight int8 [N, K],
    weight_scale [N, 1]."""
    return _ct_checkpoint(path, {"group_0": _preset("W8A8")}, **kw)


def ct_w4a16(path: Path, *, group_size: int = 128, symmetric: bool = True,
             **kw) -> QuantCheckpoint:
    """compressed-tensors `pack-quantized`, preset W4A16 (or W4A16_ASYM): 4-bit weights per
    group of `group_size` inputs. Per linear: weight_packed int32 [N, K/8], weight_scale
    [N, K/group], weight_shape int64 [2]; asymmetric adds weight_zero_point int32
    [N/8, K/group]. group_size 128 uses the WIDE shape unless `shape` is given."""
    scheme = _preset("W4A16" if symmetric else "W4A16_ASYM", group_size=group_size)
    shape = kw.pop("shape", WIDE if group_size > 64 else SMALL)
    return _ct_checkpoint(path, {"group_0": scheme}, shape=shape, **kw)


# --------------------------------------------------------------------------------------------
# GPTQ and AWQ, from compressed-tensors' 4-bit codes


def _int4(w: torch.Tensor, group_size: int, symmetric: bool):
    """compressed-tensors' W4A16 quantization of w [N, K] with float16-representable scales:
    (codes uint8 [N, K] 0..15, zeros uint8 [N, G] 0..15, scales float32 [N, G],
    the pack-quantized state dict, its scheme)."""
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=group_size,
                            symmetric=symmetric)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    w = w.float()
    scale, zero_point = calculate_qparams(*_weight_minmax(w, args), args)
    scale = scale.half().float()  # GPTQ and AWQ store float16 scales
    state = PackedQuantizationCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_zero_point": zero_point}, scheme)
    n, k = w.shape
    codes = unpack_from_int32(state["weight_packed"], 4, torch.Size([n, k])).int() + 8
    if symmetric:
        zeros = torch.full_like(scale, 8, dtype=torch.int32)
    else:
        zeros = unpack_from_int32(state["weight_zero_point"], 4, torch.Size(scale.shape),
                                  packed_dim=0).int() + 8
    return codes.to(torch.uint8), zeros.to(torch.uint8), scale, state, scheme


def _pack4(unsigned: torch.Tensor, packed_dim: int) -> torch.Tensor:
    """compressed-tensors' pack_to_int32 of unsigned 4-bit values (0..15): eight per int32,
    the first in the low nibble."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    return pack_to_int32((unsigned.to(torch.int32) - 8).to(torch.int8), 4, packed_dim=packed_dim)


def _unpack4(packed: torch.Tensor, rows: int, cols: int, packed_dim: int) -> torch.Tensor:
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    return unpack_from_int32(packed, 4, torch.Size([rows, cols]), packed_dim=packed_dim).int() + 8


def _awq_interleave(x: torch.Tensor) -> torch.Tensor:
    """Columns of x [R, N] reordered so that packing eight at a time puts output
    8c + AWQ_ORDER[i] in nibble i."""
    return x.unflatten(1, (-1, 8))[:, :, list(AWQ_ORDER)].flatten(1)


def _awq_deinterleave(x: torch.Tensor) -> torch.Tensor:
    inverse = [AWQ_ORDER.index(i) for i in range(8)]
    return x.unflatten(1, (-1, 8))[:, :, inverse].flatten(1)


def _int4_checkpoint(path: Path, method: str, *, group_size: int, symmetric: bool,
                     desc_act: bool, shape: dict | None, dtype: torch.dtype,
                     seed: int) -> QuantCheckpoint:
    path = Path(path)
    model = _random_model(shape if shape is not None else (WIDE if group_size > 64 else SMALL),
                          dtype, seed)
    dense = _float32(model.state_dict())
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    result = QuantCheckpoint(path, dense, dict(dense), _linear_names(model))
    gen = torch.Generator().manual_seed(seed + 1)
    perms: dict[str, torch.Tensor] = {}
    for name in result.quantized:
        w = dense[f"{name}.weight"]
        n, k = w.shape
        # GPTQ orders a layer's inputs by its input Hessian's diagonal: the projections
        # that read the same input (q, k, v; gate, up) get the same order.
        shared = name.replace("k_proj", "q_proj").replace("v_proj", "q_proj") \
            .replace("up_proj", "gate_proj")
        if shared not in perms:
            perms[shared] = torch.randperm(k, generator=gen) if desc_act else torch.arange(k)
        perm = perms[shared]
        codes_p, zeros, scale, state, scheme = _int4(w[:, perm], group_size, symmetric)
        inverse = torch.argsort(perm)
        codes = codes_p[:, inverse]  # back to the original input order
        g_idx = (torch.arange(k) // group_size)[inverse]
        result.ct_reference[name] = (state, scheme)
        if desc_act:
            result.perm[name] = perm
        del tensors[f"{name}.weight"]
        if method == "gptq":
            tensors[f"{name}.qweight"] = _pack4(codes.t(), packed_dim=0)
            tensors[f"{name}.qzeros"] = _pack4((zeros.t().int() - 1) % 16, packed_dim=1)
            tensors[f"{name}.g_idx"] = g_idx.to(torch.int32)
        else:
            tensors[f"{name}.qweight"] = _pack4(_awq_interleave(codes.t()), packed_dim=1)
            tensors[f"{name}.qzeros"] = _pack4(_awq_interleave(zeros.t()), packed_dim=1)
        tensors[f"{name}.scales"] = scale.t().contiguous().half()
        result.dequantized[f"{name}.weight"] = _dequantize_int4(
            tensors, name, method, n, k)
    if method == "gptq":
        qconfig = {"quant_method": "gptq", "bits": 4, "group_size": group_size,
                   "desc_act": desc_act, "sym": symmetric, "damp_percent": 0.01,
                   "true_sequential": True, "static_groups": False,
                   "checkpoint_format": "gptq"}
    else:
        qconfig = {"quant_method": "awq", "bits": 4, "group_size": group_size,
                   "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
    _save(path, model.config, tensors, qconfig)
    return result


def _dequantize_int4(tensors: dict[str, torch.Tensor], name: str, method: str, n: int,
                     k: int) -> torch.Tensor:
    """float32 [N, K] of a GPTQ (v1) or AWQ GEMM linear `name` in `tensors`."""
    scales = tensors[f"{name}.scales"].float()  # [G, N]
    groups = scales.shape[0]
    if method == "gptq":
        codes = _unpack4(tensors[f"{name}.qweight"], k, n, packed_dim=0)  # [K, N]
        zeros = (_unpack4(tensors[f"{name}.qzeros"], groups, n, packed_dim=1) + 1) % 16
        g_idx = tensors[f"{name}.g_idx"].long()
    else:
        codes = _awq_deinterleave(_unpack4(tensors[f"{name}.qweight"], k, n, packed_dim=1))
        zeros = _awq_deinterleave(_unpack4(tensors[f"{name}.qzeros"], groups, n, packed_dim=1))
        g_idx = torch.arange(k) // (k // groups)
    return ((codes - zeros[g_idx]).float() * scales[g_idx]).t().contiguous()


def gptq_checkpoint(path: Path, *, group_size: int = 128, sym: bool = True,
                    desc_act: bool = False, shape: dict | None = None,
                    dtype: torch.dtype = torch.float32, seed: int = 0) -> QuantCheckpoint:
    """GPTQ v1 layout, 4 bits (quant_method "gptq", checkpoint_format "gptq"). Per linear:
    qweight int32 [K/8, N], qzeros int32 [G, N/8] (zero - 1), scales float16 [G, N],
    g_idx int32 [K] (a shuffled grouping with desc_act); no `weight`. The codes are
    round-to-nearest (compressed-tensors' W4A16 quantizer), not GPTQ's error feedback."""
    return _int4_checkpoint(path, "gptq", group_size=group_size, symmetric=sym,
                            desc_act=desc_act, shape=shape, dtype=dtype, seed=seed)


def awq_checkpoint(path: Path, *, group_size: int = 128, shape: dict | None = None,
                   dtype: torch.dtype = torch.float32, seed: int = 0) -> QuantCheckpoint:
    """AWQ GEMM layout, 4 bits with zero points (quant_method "awq", version "gemm"). Per
    linear: qweight int32 [K, N/8] and qzeros int32 [G, N/8] in AWQ's interleaved nibble
    order, scales float16 [G, N]. Round-to-nearest codes, no activation-aware scaling."""
    return _int4_checkpoint(path, "awq", group_size=group_size, symmetric=False,
                            desc_act=False, shape=shape, dtype=dtype, seed=seed)


# --------------------------------------------------------------------------------------------
# HF fine-grained FP8


def _hf_fp8_ops(block: tuple[int, int]):
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize, Fp8Quantize

    config = FineGrainedFP8Config(weight_block_size=list(block))
    quantizer = SimpleNamespace(quantization_config=config)
    return config, Fp8Quantize(quantizer), Fp8Dequantize(quantizer)


def hf_fp8_block(path: Path, *, block: tuple[int, int] = (128, 128), shape: dict | None = None,
                 dtype: torch.dtype = torch.float32, seed: int = 0) -> QuantCheckpoint:
    """HF fine-grained FP8 (quant_method "fp8", DeepSeek-V3 style), WIDE shape by default.
    Per linear: weight float8_e4m3fn [N, K], weight_scale_inv float32
    [ceil(N/bn), ceil(K/bk)], quantized by transformers' Fp8Quantize."""
    path = Path(path)
    model = _random_model(shape or WIDE, dtype, seed)
    dense = _float32(model.state_dict())
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    result = QuantCheckpoint(path, dense, dict(dense), _linear_names(model))
    config, quantize, dequantize = _hf_fp8_ops(block)
    for name in result.quantized:
        out = quantize.convert({f"{name}.weight": dense[f"{name}.weight"]})
        if f"{name}.weight_scale_inv" not in out:
            raise ValueError(f"{name}'s shape is not whole {block} blocks")
        tensors.update(out)
        result.dequantized[f"{name}.weight"] = dequantize.convert(
            {"weight": out[f"{name}.weight"],
             "weight_scale_inv": out[f"{name}.weight_scale_inv"]})["weight"].float()
    _save(path, model.config, tensors, config.to_dict())
    return result


# --------------------------------------------------------------------------------------------
# saving and reference loading


def _save(path: Path, config, tensors: dict[str, torch.Tensor], qconfig: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    config_file = path / "config.json"
    data = json.loads(config_file.read_text())
    data["quantization_config"] = qconfig
    config_file.write_text(json.dumps(data, indent=2, sort_keys=True))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    save_tokenizer(path)


def quant_method(path: Path) -> str | None:
    config = json.loads((Path(path) / "config.json").read_text())
    return config.get("quantization_config", {}).get("quant_method")


HF_LOADABLE = {"compressed-tensors": True, "fp8": True, "gptq": False, "awq": False}
"""What transformers 5.24 loads on this CPU (AutoModelForCausalLM.from_pretrained):
compressed-tensors yes (by default the weights are decompressed on the first forward and
the activations fake-quantized as the scheme says; with CompressedTensorsConfig(
dequantize=True) it is a plain dense model. Two gaps: asymmetric pack-quantized loads only
with dequantize=True, and k_scale/v_scale are ignored as unexpected keys, the KV cache is
not quantized); HF fine-grained FP8 yes, dequantized at load (without a GPU the quantizer
sets dequantize=True itself, activations are not quantized); GPTQ no (ImportError: needs
optimum, then gptqmodel), AWQ no (ImportError: needs gptqmodel)."""


def dequantized_checkpoint(path: Path, out: Path | None = None) -> Path:
    """A dense float32 HF checkpoint (same config minus quantization_config, same tokenizer)
    of the GPTQ, AWQ or HF FP8 checkpoint at `path`, dequantized here from the layouts
    documented above (compressed-tensors' unpacking, HF's Fp8Dequantize): the fallback
    reference for formats transformers cannot load on this machine."""
    path = Path(path)
    out = Path(out) if out is not None else path.with_name(path.name + "-dequantized")
    config = json.loads((path / "config.json").read_text())
    qconfig = config.pop("quantization_config")
    method = qconfig["quant_method"]
    tensors = load_file(str(path / "model.safetensors"))
    dense = {}
    for key, value in tensors.items():
        prefix = key.rsplit(".", 1)[0]
        if method in ("gptq", "awq") and key.endswith(".qweight"):
            n = tensors[f"{prefix}.scales"].shape[1]
            k = value.shape[0] * (8 if method == "gptq" else 1)
            dense[f"{prefix}.weight"] = _dequantize_int4(tensors, prefix, method, n, k)
        elif method == "fp8" and f"{prefix}.weight_scale_inv" in tensors:
            if key.endswith(".weight"):
                _, _, dequantize = _hf_fp8_ops(tuple(qconfig["weight_block_size"]))
                dense[key] = dequantize.convert(
                    {"weight": value,
                     "weight_scale_inv": tensors[f"{prefix}.weight_scale_inv"]})["weight"].float()
        elif not key.endswith((".qzeros", ".scales", ".g_idx")):
            dense[key] = value.float()
    out.mkdir(parents=True, exist_ok=True)
    config["dtype"] = "float32"
    config.pop("torch_dtype", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    save_file(dense, str(out / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(out)
    return out


def hf_reference_model(path: Path, *, dequantize: bool = False):
    """transformers' float32 model of the quantized checkpoint at `path`, in eval mode.

    compressed-tensors: loaded by transformers; with `dequantize=False` (default) the
    model fake-quantizes as the scheme says (dynamic/static activation quantization, k/v
    quantization) on dequantized weights, so its logits are what quantized kernels should
    give; `dequantize=True` gives the plain dense model of the dequantized weights (a
    bfloat16 checkpoint's dequantized in bfloat16, then cast). compressed-tensors 0.20.1
    cannot load an asymmetric pack-quantized checkpoint without `dequantize=True` (it
    expects the zero point unpacked). HF FP8:
    loaded by transformers, which dequantizes it on a CPU (activations not quantized).
    GPTQ/AWQ: transformers cannot load them here, so the dense model of
    `dequantized_checkpoint(path)`."""
    method = quant_method(path)
    kwargs: dict = {"dtype": torch.float32}
    if method == "compressed-tensors" and dequantize:
        from transformers import CompressedTensorsConfig

        kwargs["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    if not HF_LOADABLE.get(method, True):
        path = dequantized_checkpoint(path)
    with warnings.catch_warnings():  # "the quantization_config from the model will be used"
        warnings.simplefilter("ignore", UserWarning)
        return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()


def hf_reference_logits(path: Path, token_ids: list[int], *, dequantize: bool = False
                        ) -> torch.Tensor:
    """float32 logits [len(token_ids), vocab] of `hf_reference_model(path)` on one prompt."""
    model = hf_reference_model(path, dequantize=dequantize)
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].float()
