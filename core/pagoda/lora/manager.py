"""The worker's LoRA adapters: which adapter sits in which device slot, an LRU of host
copies, and each step's slot per token.

The scheduler puts at most `max_loras` distinct adapters in a step, so the step's
adapters always fit the slots: one not in a slot takes the least recently used slot
that no adapter of the step holds, its weights from the host copy (read from disk
first if there is none).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from pagoda.config.engine_config import LoRAConfig
from pagoda.engine.scheduler_output import SchedulerOutput
from pagoda.lora.adapter import WEIGHTS_FILE, AdapterSpec, base_shapes, read_adapter
from pagoda.lora.layers import LoRASlots, TokenSlots
from pagoda.lora.request import LoRARequest
from pagoda.models.layers.linear import Linear
from pagoda.ops.lora_reference import group_by_slot

_Weights = dict[str, tuple[torch.Tensor, torch.Tensor]]


def attach_lora_slots(model: nn.Module, config: LoRAConfig, tokens: TokenSlots,
                      dtype: torch.dtype, device: torch.device) -> list[LoRASlots]:
    """Give every linear layer of the model's attention and MLP projections its slots;
    ValueError if the model has none (an architecture LoRA does not reach)."""
    from pagoda.lora.adapter import PROJECTIONS

    slots = []
    for module in model.modules():
        if isinstance(module, Linear) and any(
                name.rpartition(".")[2] in PROJECTIONS for name in module.checkpoint_names):
            module.lora = LoRASlots(module, config.max_loras, config.max_lora_rank,
                                    tokens, dtype, device)
            slots.append(module.lora)
    if not slots:
        raise ValueError(f"enable_lora: {type(model).__name__} has no Pagoda linear layers of "
                         f"the attention or MLP projections to adapt (the transformers "
                         f"fallback and pooling models are not supported)")
    return slots


class LoRAManager:
    def __init__(self, model: nn.Module, config: LoRAConfig, hf_config: Any,
                 dtype: torch.dtype, device: torch.device, max_tokens: int):
        self.config = config
        self.hf_config = hf_config
        self.dtype = dtype
        order, tiles = group_by_slot(np.full(max_tokens, -1), config.max_loras)
        self.tokens = TokenSlots(
            torch.full((max_tokens,), -1, dtype=torch.int32, device=device),
            torch.from_numpy(order).to(device), torch.from_numpy(tiles).to(device))
        self.layers = {s.layer_prefix: s for s in
                       attach_lora_slots(model, config, self.tokens, dtype, device)}
        self._by_part = {part: s for s in self.layers.values() for part in s.parts}
        self._decoder_layers = {part.split(".self_attn.")[0].split(".mlp.")[0]
                                for part in self._by_part}
        """The decoder layers this worker holds (a pipeline stage holds some)."""
        self.slots: OrderedDict[int, int] = OrderedDict()
        """Adapter id -> its device slot, least recently used first."""
        self.host: OrderedDict[int, tuple[AdapterSpec, _Weights]] = OrderedDict()
        """Adapter id -> its weights in host memory, least recently used first."""
        self.requests: dict[str, LoRARequest] = {}
        """Request id -> its adapter, for the requests that have one."""

    def _host_copy(self, lora: LoRARequest) -> tuple[AdapterSpec, _Weights]:
        if lora.lora_int_id in self.host:
            self.host.move_to_end(lora.lora_int_id)
            return self.host[lora.lora_int_id]
        base = base_shapes(self.hf_config)
        assert base is not None, "LoRA is refused for models without the usual projections"
        spec = read_adapter(lora, base, self.config.max_lora_rank)
        tensors = load_file(f"{lora.lora_path}/{WEIGHTS_FILE}")
        weights = {}
        for module, (a_key, b_key) in spec.modules.items():
            if module not in self._by_part:
                decoder_layer = module.split(".self_attn.")[0].split(".mlp.")[0]
                if decoder_layer not in self._decoder_layers:
                    continue  # another pipeline stage's
                raise ValueError(f"LoRA adapter {lora.lora_name!r}: module {module!r} is not a "
                                 f"layer of this model (its layers: e.g. "
                                 f"{next(iter(self._by_part))})")
            weights[module] = (tensors[a_key].to(self.dtype), tensors[b_key].to(self.dtype))
        self.host[lora.lora_int_id] = spec, weights
        while len(self.host) > (self.config.max_cpu_loras or self.config.max_loras):
            self.host.popitem(last=False)
        return spec, weights

    def add(self, lora: LoRARequest) -> None:
        """Read `lora` into host memory now (checked against this worker's layers)."""
        self._host_copy(lora)

    def remove(self, lora_int_id: int) -> None:
        """Drop `lora_int_id`'s host copy; its slot, if it has one, stays until reused."""
        self.host.pop(lora_int_id, None)

    def _slot_for(self, lora: LoRARequest, in_step: set[int]) -> int:
        """`lora`'s device slot, loading it into a free one (or into the least recently
        used one that no adapter of this step holds)."""
        if lora.lora_int_id in self.slots:
            self.slots.move_to_end(lora.lora_int_id)
            return self.slots[lora.lora_int_id]
        if len(self.slots) < self.config.max_loras:
            slot = len(self.slots)
        else:
            victim = next(i for i in self.slots if i not in in_step)
            slot = self.slots.pop(victim)
        spec, weights = self._host_copy(lora)
        for layer in self.layers.values():
            layer.set_slot(slot, {p: weights[p] for p in layer.parts if p in weights},
                           spec.scaling)
        self.slots[lora.lora_int_id] = slot
        return slot

    def prepare(self, step: SchedulerOutput, num_tokens: int) -> None:
        """Load the step's adapters into slots and write each token's slot (padding rows
        up to `num_tokens`, the step's padded size, and beyond: -1)."""
        for request_id in step.finished_request_ids:
            self.requests.pop(request_id, None)
        for new in step.new_requests:
            if new.lora_request is not None:
                self.requests[new.request_id] = new.lora_request
        loras = [self.requests.get(item.request_id) for item in step.scheduled]
        in_step = {lora.lora_int_id for lora in loras if lora is not None}
        assert len(in_step) <= self.config.max_loras, "the scheduler keeps to max_loras"
        per_request = np.array([-1 if lora is None else self._slot_for(lora, in_step)
                                for lora in loras], dtype=np.int32)
        lengths = [len(item.token_ids) for item in step.scheduled]
        capacity = self.tokens.slots.shape[0]
        if num_tokens > capacity:
            raise ValueError(f"a step of {num_tokens} tokens is over the LoRA slot buffer's "
                             f"{capacity}")
        host = np.full(capacity, -1, dtype=np.int32)
        host[: sum(lengths)] = np.repeat(per_request, lengths)
        order, tiles = group_by_slot(host, self.config.max_loras)
        for buffer, values in zip((self.tokens.slots, self.tokens.order, self.tokens.tiles),
                                  (host, order, tiles)):
            buffer.copy_(torch.from_numpy(values), non_blocking=True)
