"""What the sampling and the pooling model runners share: the model and its caches, and
one step's forward pass (flattened inputs in, final hidden states out).

Where platforms differ, it asks the platform: how to pad a step (`Platform.step_padding`)
and under which grad mode to run. Under pipeline parallelism each stage runs its layers
on the activations the previous stage sends (the first embeds the tokens) and sends its
own to the next.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadataBuilder
from pagoda.distributed import pp_group
from pagoda.engine.scheduler_output import SchedulerOutput, StepResult
from pagoda.platforms.platform import Platform
from pagoda.platforms.step_padding import StepPadding
from pagoda.worker.step_inputs import StepInputs


class StepRunner(ABC):
    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[torch.Tensor],
        builder: AttentionMetadataBuilder,
        block_size: int,
        device: torch.device,
        platform: Platform,
        padding: StepPadding | None = None,
    ):
        self.model = model
        self.kv_caches = kv_caches
        self.builder = builder
        self.block_size = block_size
        self.device = device
        self.platform = platform
        self.padding = padding
        self.stage = pp_group()

    def execute_model(self, step: SchedulerOutput) -> StepResult:
        """Launch one step; its result is read when the engine asks for it."""
        grad_mode = torch.inference_mode if self.platform.uses_inference_mode else torch.no_grad
        with grad_mode():
            return self._execute(step)

    @abstractmethod
    def _execute(self, step: SchedulerOutput) -> StepResult:
        """Run `step` (under the platform's grad mode)."""

    def _forward(self, inputs: StepInputs, **model_inputs: Any) -> torch.Tensor | None:
        """The step's final hidden states; None on a pipeline stage before the last, which
        hands its activations to the next stage instead. `model_inputs`: what the model
        takes beside the tokens (e.g. token type ids)."""
        metadata = self.builder.build(inputs.metadata)
        args = (inputs.input_ids, inputs.positions, self.kv_caches, metadata)
        if self.stage.is_first:
            out = self.model(*args, **model_inputs)
        else:
            like = self.model.intermediate_like(inputs.shape.num_tokens, self.device)
            out = self.model(*args, intermediate=self.stage.recv(like))
        if self.stage.is_last:
            return out
        self.stage.send(out)
        return None
