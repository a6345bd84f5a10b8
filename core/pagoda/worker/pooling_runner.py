"""Runs one scheduled step of a pooling model: flatten, forward, then each finished
prompt's output (pooled, cut and normalized as its request asks), copied to the host.

A pooling request is its prompt: nothing is sampled. Its output comes from the step that
computes its last prompt token (the scheduler marks it `sample`); with last-token pooling
the chunks before only fill the KV cache. A model that reads every position (mean or cls
pooling, an encoder's bidirectional attention) gets each prompt whole in one step: the
engine core turns chunked prefill and prefix caching off for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadataBuilder
from pagoda.engine.scheduler_output import SchedulerOutput
from pagoda.models.pooler import PoolingModel, finish_outputs
from pagoda.platforms.platform import Platform
from pagoda.platforms.step_padding import StepPadding
from pagoda.pooling_params import PoolingParams
from pagoda.worker.step_inputs import StepInputs, build_step_inputs
from pagoda.worker.step_result import PendingPooledOutput, copy_to_host
from pagoda.worker.step_runner import StepRunner


@dataclass
class _PoolingState:
    params: PoolingParams
    token_type_ids: list[int] | None


class PoolingModelRunner(StepRunner):
    model: PoolingModel

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
        assert isinstance(model, PoolingModel), "a pooling runner runs a PoolingModel"
        super().__init__(model, kv_caches, builder, block_size, device, platform, padding)
        self.states: dict[str, _PoolingState] = {}

    def _update_states(self, step: SchedulerOutput) -> None:
        for request_id in step.finished_request_ids:
            self.states.pop(request_id, None)
        for new in step.new_requests:
            assert new.pooling_params is not None, "a pooling model runs pooling requests"
            self.states[new.request_id] = _PoolingState(new.pooling_params, new.token_type_ids)

    def _token_type_ids(self, step: SchedulerOutput, inputs: StepInputs) -> torch.Tensor:
        """The step's tokens' segments (0 where a request has none), padded like the step."""
        ids: list[int] = []
        for item in step.scheduled:
            types = self.states[item.request_id].token_type_ids
            start, count = item.num_computed_tokens, len(item.token_ids)
            ids += types[start : start + count] if types is not None else [0] * count
        ids += [0] * (inputs.shape.num_tokens - len(ids))
        return torch.tensor(ids, dtype=torch.int64).to(self.device, non_blocking=True)

    def _execute(self, step: SchedulerOutput) -> PendingPooledOutput:
        self._update_states(step)
        if step.is_empty:
            return PendingPooledOutput([], [], None)
        inputs = build_step_inputs(step.scheduled, self.block_size, self.device, self.padding)
        model_inputs = ({"token_type_ids": self._token_type_ids(step, inputs)}
                        if self.model.uses_token_type_ids else {})
        hidden = self._forward(inputs, **model_inputs)
        assert hidden is not None, "pooling models run on one pipeline stage"
        bounds = inputs.metadata.query_start_loc_cpu
        done = [(i, item.request_id) for i, item in enumerate(step.scheduled) if item.sample]
        outputs: list[torch.Tensor] = []
        if done:
            pooled = self.model.pool(hidden, [(bounds[i], bounds[i + 1]) for i, _ in done])
            outputs = finish_outputs(pooled, [self.states[rid].params for _, rid in done],
                                     self.model.pooler_spec)
        self.platform.after_forward()
        if not outputs:
            return PendingPooledOutput([], [], None)
        pinned = self.platform.executes_asynchronously
        pending = PendingPooledOutput([rid for _, rid in done], [len(o) for o in outputs],
                                      copy_to_host(torch.cat(outputs), pinned))
        if pinned:
            pending.event = torch.Event(device=self.device)
            pending.event.record()
        return pending
