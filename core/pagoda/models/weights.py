"""Checkpoint weights: reading safetensors, loading named tensors into a model, dummy weights.

Every weight format (safetensors, GGUF ...) becomes an iterator of (checkpoint name, tensor)
in HF naming; `load_checkpoint_weights` maps those names onto the model's parameters. A
linear layer's weight goes through its QuantMethod, which may keep a quantized tensor as is.
A module may also load checkpoint tensors that are not parameters of its own (e.g. the
attention layer's KV cache scales) by naming them in `checkpoint_loaders(path)`. A module
whose parameter stacks several checkpoint tensors (the experts of a mixture-of-experts
layer) names them in `checkpoint_shards(attr)` and places each with its
`load_checkpoint_tensor`, as a linear layer does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from pagoda.models.layers.linear import Linear, MergedColumnParallelLinear
from pagoda.quant.checkpoint import CheckpointTensor, copy_weight, dense
from pagoda.quant.layout import layout_of

SAFETENSORS_INDEX = "model.safetensors.index.json"


def safetensors_files(path: str | Path) -> list[Path]:
    """A checkpoint's safetensors files: the file itself, the index's shards, or all there."""
    path = Path(path)
    if path.is_file():
        return [path]
    index = path / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    return sorted(path.glob("*.safetensors"))


def iterate_safetensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) for every tensor of a safetensors file or checkpoint directory."""
    files = safetensors_files(path)
    if not files:
        raise FileNotFoundError(f"No safetensors weights found in {path}")
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield name, f.get_tensor(name)


def checkpoint_targets(model: nn.Module) -> dict[str, tuple[str, str | None]]:
    """Checkpoint name -> (model parameter name, shard) for every weight the model expects.

    A merged layer at "a.qkv_proj" with shard "q_proj" expects "a.q_proj.weight" (or, if
    its checkpoint is fused, "a.qkv_proj.weight" with shard None); a module with
    `checkpoint_shards(attr)` expects "path.<suffix>" for each suffix -> shard it gives; a
    parameter shared by two modules (tied embeddings) is expected once, by its first name.
    """
    owned = {name for name, _ in model.named_parameters()}
    targets: dict[str, tuple[str, str | None]] = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        parent = path.rpartition(".")[0]
        for pname, _ in module.named_parameters(recurse=False):
            name = prefix + pname
            if name not in owned:
                continue
            if isinstance(module, MergedColumnParallelLinear) and not module.fused_checkpoint:
                for shard in module.shards:
                    targets[f"{parent}.{shard}.{pname}".lstrip(".")] = (name, shard)
            elif hasattr(module, "checkpoint_shards"):
                for suffix, shard in module.checkpoint_shards(pname).items():
                    targets[prefix + suffix] = (name, shard)
            else:
                targets[name] = (name, None)
    return targets


def checkpoint_loaders(model: nn.Module) -> dict[str, Callable[[torch.Tensor, str], None]]:
    """Checkpoint name -> loader(tensor, name) for the optional tensors modules load
    themselves: each module's `checkpoint_loaders(its path)`, where it has one."""
    loaders: dict[str, Callable[[torch.Tensor, str], None]] = {}
    for path, module in model.named_modules():
        hook = getattr(module, "checkpoint_loaders", None)
        if callable(hook):
            loaders.update(hook(path))
    return loaders


@torch.no_grad()
def load_checkpoint_weights(
    model: nn.Module,
    weights: Iterable[tuple[str, CheckpointTensor]],
    skip: Callable[[str], bool] = lambda name: False,
) -> set[str]:
    """Load HF-named weights into `model`; returns the parameter names loaded.

    Names for which `skip` is true are ignored; those of `checkpoint_loaders` go to their
    module's loader (optional: never missing). A weight the model has no place for, or one
    the model expects that never came, is a ValueError naming it.
    """
    targets = checkpoint_targets(model)
    loaders = checkpoint_loaders(model)
    params = dict(model.named_parameters())
    seen: set[str] = set()
    for name, tensor in weights:
        if skip(name):
            continue
        if name not in targets and name in loaders:
            loaders[name](dense(tensor), name)
            continue
        if name not in targets:
            raise ValueError(
                f"Unexpected weight {name!r}: {type(model).__name__} has no parameter for it"
            )
        param_name, shard = targets[name]
        module_name, _, attr = param_name.rpartition(".")
        module = model.get_submodule(module_name)
        if isinstance(module, Linear) or hasattr(module, "checkpoint_shards"):
            # it places (and a linear's quant method loads) every tensor of it
            module.load_checkpoint_tensor(attr, tensor, shard, name)
            seen.add(name)
            continue
        tensor = dense(tensor)  # only linear layers keep quantized tensors
        part = getattr(module, "checkpoint_slice", None)  # tensor-parallel layers: their part
        if part is not None:
            try:
                tensor = part(tensor, shard, attr)
            except ValueError as exc:
                raise ValueError(f"Weight {name!r} {exc}") from None
        copy_weight(params[param_name], tensor, name)
        seen.add(name)
    missing = sorted(n for n in targets.keys() - seen if layout_of(params[targets[n][0]]).required)
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" * (len(missing) > 10))
        raise ValueError(f"Missing weights for {type(model).__name__}: {shown}")
    return {targets[name][0] for name in seen}


@torch.no_grad()
def fill_dummy_weights(model: nn.Module, seed: int = 0) -> None:
    """Deterministic random weights from `seed` (per device type).

    Matrices ~ U(-1/sqrt(in), 1/sqrt(in)), norm weights ~ 1 + U(-0.1, 0.1), biases ~
    U(-0.1, 0.1): activations stay bounded and logits are varied.
    """
    generator: torch.Generator | None = None
    for name, param in model.named_parameters():
        if not param.is_floating_point():
            raise ValueError(f"Dummy weights cannot fill non-float parameter {name!r}")
        if generator is None:
            generator = torch.Generator(device=param.device).manual_seed(seed)
        values = torch.rand(param.shape, generator=generator, device=param.device) * 2 - 1
        if param.dim() >= 2:
            values *= param.shape[-1] ** -0.5
        elif name.endswith("norm.weight"):
            values = 1 + 0.1 * values
        else:
            values *= 0.1
        param.copy_(values)


def process_weights_after_loading(model: nn.Module) -> None:
    """Let each linear layer's QuantMethod repack its loaded weights for the kernel."""
    for module in model.modules():
        if isinstance(module, Linear):
            module.quant_method.process_weights_after_loading(module)
