"""A PEFT LoRA adapter's files, read and checked against the base model without torch.

The front end checks an adapter before any request uses it, so that a bad one (a missing
file, a rank over `max_lora_rank`, shapes of another base model, a PEFT feature we do not
implement) is refused naming the problem, and the engine never sees it.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagoda.lora.request import LoRARequest

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj",
               "down_proj", "gate_up_proj")
"""The modules an adapter may target: the attention and MLP projections of the dense
decoder families."""

_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])\.weight$")
_MODULE = re.compile(r"^model\.layers\.(?P<layer>\d+)\.(?:self_attn|mlp)\.(?P<proj>\w+)$")

_UNSUPPORTED = {
    "use_dora": "DoRA adapters",
    "use_qalora": "QA-LoRA adapters",
    "fan_in_fan_out": "fan_in_fan_out weights (Conv1D base layers)",
    "lora_bias": "adapters with a bias in lora_B",
    "rank_pattern": "per-module ranks (rank_pattern)",
    "alpha_pattern": "per-module alphas (alpha_pattern)",
    "modules_to_save": "fully trained modules (modules_to_save)",
    "trainable_token_indices": "trained token embeddings (trainable_token_indices)",
    "layer_replication": "replicated layers (layer_replication)",
    "target_parameters": "adapted parameters of non-linear modules (target_parameters)",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
    "use_bdlora": "block-diagonal LoRA (use_bdlora)",
    "arrow_config": "Arrow routing (arrow_config)",
    "kasa_config": "KaSA adapters (kasa_config)",
    "monteclora_config": "MonteCLoRA adapters (monteclora_config)",
}
"""adapter_config.json fields whose non-default values we do not implement."""


@dataclass(frozen=True)
class AdapterSpec:
    """What an adapter is: its rank, its scaling and, per module it adapts (by checkpoint
    name, e.g. model.layers.0.self_attn.q_proj), the safetensors keys of its A and B."""

    rank: int
    scaling: float
    modules: dict[str, tuple[str, str]]


def _fail(request: LoRARequest, problem: str) -> ValueError:
    return ValueError(f"LoRA adapter {request.lora_name!r} ({request.lora_path}): {problem}")


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors file's header."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(size))
    return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}


@dataclass(frozen=True)
class BaseShapes:
    """What an adapter must fit: (output, input) features of each projection of a layer,
    whole, and the number of layers. Plain values, so that the engine core can report
    them to a front end that reads no HF config (`base_shapes`)."""

    projections: dict[str, tuple[int, int]]
    num_layers: int


def base_shapes(hf_config: Any) -> BaseShapes | None:
    """The shapes of a decoder with the usual projections; None for another model (LoRA
    is refused there when the model loads)."""
    try:
        return BaseShapes(projection_shapes(hf_config),
                          hf_config.get_text_config().num_hidden_layers)
    except (AttributeError, TypeError):  # a size it lacks, or holds as None
        return None


def projection_shapes(hf_config: Any) -> dict[str, tuple[int, int]]:
    """(output, input) features of each projection of a dense decoder's layer, whole."""
    text = hf_config.get_text_config()
    hidden, heads = text.hidden_size, text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    inter = text.intermediate_size
    q, kv = heads * head_dim, kv_heads * head_dim
    return {"q_proj": (q, hidden), "k_proj": (kv, hidden), "v_proj": (kv, hidden),
            "o_proj": (hidden, q), "qkv_proj": (q + 2 * kv, hidden),
            "gate_proj": (inter, hidden), "up_proj": (inter, hidden),
            "down_proj": (hidden, inter), "gate_up_proj": (2 * inter, hidden)}


def read_adapter(request: LoRARequest, base: BaseShapes, max_rank: int) -> AdapterSpec:
    """The adapter at `request.lora_path`, checked against the base model's `base` shapes;
    ValueError naming what is wrong with it."""
    root = Path(request.lora_path)
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (root / name).is_file():
            raise _fail(request, f"{name} not found")
    try:
        config = json.loads((root / CONFIG_FILE).read_text())
        shapes = safetensors_shapes(root / WEIGHTS_FILE)
    except (OSError, ValueError, struct.error) as exc:
        raise _fail(request, f"unreadable ({exc})") from None
    if config.get("peft_type", "LORA") != "LORA":
        raise _fail(request, f"peft_type {config['peft_type']!r} is not LORA")
    for key, what in _UNSUPPORTED.items():
        if config.get(key):
            raise _fail(request, f"{key}: {what} are not supported")
    if config.get("bias", "none") != "none":
        raise _fail(request, f"bias {config['bias']!r}: adapters that train biases are not "
                             "supported")
    rank, alpha = int(config.get("r", 8)), float(config.get("lora_alpha", 8))
    if not 1 <= rank <= max_rank:
        raise _fail(request, f"rank {rank} is over max_lora_rank {max_rank}")
    scaling = alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)

    expected, num_layers = base.projections, base.num_layers
    modules: dict[str, dict[str, str]] = {}
    for key in shapes:
        match = _KEY.match(key)
        if match is None:
            raise _fail(request, f"tensor {key!r} is not a LoRA A or B weight of a linear "
                                 f"layer (supported modules: {', '.join(PROJECTIONS)})")
        modules.setdefault(match["module"], {})[match["which"]] = key
    if not modules:
        raise _fail(request, f"{WEIGHTS_FILE} holds no LoRA weights")
    for module, keys in modules.items():
        found = _MODULE.match(module)
        if found is None or found["proj"] not in PROJECTIONS:
            raise _fail(request, f"module {module!r} is not supported (LoRA applies to the "
                                 f"attention and MLP projections: {', '.join(PROJECTIONS)})")
        if int(found["layer"]) >= num_layers:
            raise _fail(request, f"module {module!r}: the base model has {num_layers} layers")
        if set(keys) != {"A", "B"}:
            raise _fail(request, f"module {module!r} has lora_{''.join(keys)} only")
        out, inp = expected[found["proj"]]
        want = {"A": [rank, inp], "B": [out, rank]}
        for which, key in keys.items():
            if shapes[key] != want[which]:
                raise _fail(request, f"{key} has shape {shapes[key]}, the base model and "
                                     f"rank {rank} need {want[which]} (an adapter of "
                                     "another base model?)")
    return AdapterSpec(rank, scaling, {m: (k["A"], k["B"]) for m, k in modules.items()})


class AdapterCheck:
    """The front end's check of each request's adapter: LoRA is on, the adapter is sound
    (`read_adapter`, once per id), and an id always names the same adapter."""

    def __init__(self, base: BaseShapes | None, enabled: bool, max_rank: int,
                 load: Callable[[LoRARequest], str | None] | None = None):
        """`load`: has the engine read a new adapter (the engine core's `add_lora`), and
        says what is wrong with it, or None; None: adapters are loaded otherwise
        (`AsyncLLM.add_lora_adapter` does it beside this check)."""
        self.base = base
        self.enabled = enabled
        self.max_rank = max_rank
        self.load = load
        self._known: dict[int, LoRARequest] = {}

    def known(self, request: LoRARequest) -> bool:
        """Whether `request` was checked (and loaded) before."""
        return self._known.get(request.lora_int_id) == request

    def __call__(self, request: LoRARequest) -> None:
        if not self.enabled:
            raise ValueError(f"lora_request {request.lora_name!r}: LoRA is off (start the "
                             "engine with enable_lora)")
        known = self._known.get(request.lora_int_id)
        if known == request:
            return
        if known is not None:
            raise ValueError(f"lora_int_id {request.lora_int_id} is adapter "
                             f"{known.lora_name!r} ({known.lora_path}), not "
                             f"{request.lora_name!r} ({request.lora_path})")
        assert self.base is not None, "the base model's shapes are known where LoRA is on"
        read_adapter(request, self.base, self.max_rank)
        problem = self.load(request) if self.load is not None else None
        if problem is not None:
            raise ValueError(problem)
        self._known[request.lora_int_id] = request

    def forget(self, lora_int_id: int) -> None:
        """The id may name another adapter from now on."""
        self._known.pop(lora_int_id, None)
