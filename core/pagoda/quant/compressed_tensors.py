"""compressed-tensors checkpoints (llmcompressor's output): FP8 and INT8 W8A8, W4A16 and
W8A16 packed integers, chosen per layer by the config's groups, targets and ignore list.

A config group pairs `targets` (module names, "re:" patterns or "Linear") with a weight
scheme and an optional input-activation scheme; `ignore` lists modules left dense. The
`format` (per group, or for the whole config) says how the tensors are stored. Every
combination that is not supported is refused at load, naming it and the layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from pagoda.quant.matching import matches, one_answer
from pagoda.quant.method import QuantMethod
from pagoda.quant.unquantized import UnquantizedMethod
from pagoda.quant.w8a8 import Fp8LinearMethod, Int8LinearMethod, W8A8Scheme
from pagoda.quant.woq import WoqLinearMethod, WoqScheme

SOURCE = "compressed-tensors"


class UnsupportedScheme(ValueError):
    pass


@dataclass(frozen=True)
class _Group:
    name: str
    targets: tuple[str, ...]
    weights: dict[str, Any]
    inputs: dict[str, Any] | None
    format: str | None

    def describe(self) -> str:
        w, a = self.weights, self.inputs
        acts = (f"{a.get('type')}{a.get('num_bits')} {a.get('strategy')} "
                f"{'dynamic' if a.get('dynamic') else 'static'}" if a else "none")
        return (f"config group {self.name!r} (format {self.format}, weights {w.get('type')}"
                f"{w.get('num_bits')} {w.get('strategy')}, activations {acts})")


def _method(group: _Group) -> QuantMethod:
    """The layer method for one config group, or UnsupportedScheme saying why not."""
    w, a, fmt = group.weights, group.inputs, group.format

    def refuse(why: str) -> UnsupportedScheme:
        return UnsupportedScheme(f"{SOURCE} {group.describe()}: {why}")

    if w.get("dynamic"):
        raise refuse("dynamically quantized weights are not supported")
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    if a is not None:
        if a.get("type") != kind or a.get("num_bits") != 8 or bits != 8:
            raise refuse("only FP8 x FP8 and INT8 x INT8 with activations are supported")
        if not a.get("symmetric", True) or not w.get("symmetric", True):
            raise refuse("asymmetric W8A8 (zero points) is not supported")
        dynamic = bool(a.get("dynamic"))
        act = a.get("strategy")
        if dynamic and act not in ("token", "group") or not dynamic and act != "tensor":
            raise refuse(f"{'dynamic' if dynamic else 'static'} activations per {act} are "
                         f"not supported (dynamic per token, or static per tensor)")
        if strategy not in ("tensor", "channel", "block") or (
                strategy == "block" and (kind != "float" or act != "group")):
            raise refuse(f"weight strategy {strategy!r} is not supported here (tensor, "
                         f"channel; FP8 128x128 blocks with per-group activations)")
        block = tuple(w.get("block_structure") or ()) or None
        if strategy == "block" and (block is None or len(block) != 2 or
                                    a.get("group_size") not in (None, block[1])):
            raise refuse(f"block structure {block} with activation groups of "
                         f"{a.get('group_size')} is not supported")
        expected = "float-quantized" if kind == "float" else "int-quantized"
        if fmt != expected:
            raise refuse(f"format {fmt!r} is not supported for this scheme (expected "
                         f"{expected!r})")
        scheme = W8A8Scheme(strategy=strategy, block=block, static_input=not dynamic,  # type: ignore[arg-type]
                            source=SOURCE)
        return Fp8LinearMethod(scheme) if kind == "float" else Int8LinearMethod(scheme)
    if kind != "int" or bits not in (4, 8):
        raise refuse("weight-only schemes must be 4- or 8-bit integers (FP8 weights need "
                     "FP8 activations)")
    if fmt != "pack-quantized":
        raise refuse(f"format {fmt!r} is not supported for weight-only schemes "
                     f"(pack-quantized is)")
    if strategy not in ("group", "channel"):
        raise refuse(f"weight strategy {strategy!r} is not supported (group, channel)")
    actorder = w.get("actorder")
    return WoqLinearMethod(WoqScheme(
        "compressed-tensors", bits=bits,
        group_size=w.get("group_size") if strategy == "group" else None,
        symmetric=bool(w.get("symmetric", True)), act_order=actorder == "group"))


class CompressedTensorsMethod(QuantMethod):
    name = "compressed-tensors"
    checkpoint_format = "hf"

    def __init__(self, groups: list[_Group], ignore: list[str]):
        self.groups = groups
        self.ignore = ignore

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CompressedTensorsMethod:
        status = config.get("quantization_status", "compressed")
        if status not in ("compressed", "frozen"):
            raise UnsupportedScheme(f"{SOURCE} checkpoint with quantization_status "
                                    f"{status!r}: only compressed checkpoints load")
        groups = []
        for name, group in (config.get("config_groups") or {}).items():
            if group.get("output_activations"):
                raise UnsupportedScheme(f"{SOURCE} config group {name!r}: output activation "
                                        f"quantization is not supported")
            groups.append(_Group(name, tuple(group.get("targets") or ()), group["weights"],
                                 group.get("input_activations"),
                                 group.get("format") or config.get("format")))
        if not groups and not config.get("kv_cache_scheme"):
            raise UnsupportedScheme(f"{SOURCE} config quantizes nothing (no config_groups, "
                                    f"no kv_cache_scheme)")
        # Without config groups only the KV cache is quantized (its scales load with the
        # attention layers): every linear layer stays dense.
        for group in groups:
            _method(group)  # refuse an unsupported scheme at once, before any layer
        return cls(groups, list(config.get("ignore") or ()))

    def describe(self) -> str:
        groups = ", ".join(g.describe() for g in self.groups) or "linear layers dense"
        return f"{self.name} ({groups})"

    def _group_of(self, name: str) -> _Group | None:
        if any(matches(name, target) for target in self.ignore):
            return None
        # A named target is more specific than "Linear"; the first match otherwise.
        named = [g for g in self.groups if any(t != "Linear" and matches(name, t)
                                               for t in g.targets)]
        found = named or [g for g in self.groups if "Linear" in g.targets]
        return found[0] if found else None

    def for_layer(self, layer: nn.Module) -> QuantMethod:
        names = layer.checkpoint_names
        groups = {n: self._group_of(n) for n in names}
        one_answer(layer.prefix, names, [g.describe() if g else "not quantized"
                                         for g in groups.values()])
        group = groups[names[0]]
        return UnquantizedMethod() if group is None else _method(group)
