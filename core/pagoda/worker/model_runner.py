"""Runs one scheduled step: flatten, forward, logits, sample, all on the device.

`execute_model` launches the step and returns at once where the device runs
asynchronously; the host reads the sampled ids only when the engine asks for the result.
A token still in flight from the previous step (the scheduler's placeholder) is taken
from that step's sampled ids on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadataBuilder
from pagoda.engine.request import PLACEHOLDER_TOKEN_ID
from pagoda.engine.scheduler_output import SchedulerOutput
from pagoda.sample import Sampler, SamplingState, compute_prompt_logprobs
from pagoda.worker.decode_graphs import DecodeGraphs
from pagoda.worker.step_inputs import StepInputs, build_step_inputs
from pagoda.worker.step_result import (
    PendingStepOutput,
    PromptLogprobRows,
    SampledRow,
    copy_to_host,
)


@dataclass
class _PromptPositions:
    request_id: str
    rows: list[int]
    targets: list[int]
    k: int


class ModelRunner:
    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[torch.Tensor],
        builder: AttentionMetadataBuilder,
        block_size: int,
        vocab_size: int,
        device: torch.device,
        seed: int = 0,
        device_is_async: bool = False,
    ):
        self.model = model
        self.kv_caches = kv_caches
        self.builder = builder
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = device
        self.device_is_async = device_is_async
        self.sampler = Sampler(device=device, seed=seed)
        self.states: dict[str, SamplingState] = {}
        self.graphs: DecodeGraphs | None = None
        self._last_sampled: torch.Tensor | None = None
        """The previous step's sampled ids, on the device."""
        self._last_rows: dict[str, int] = {}
        """Request id -> its row in `_last_sampled`."""

    def _update_states(self, step: SchedulerOutput) -> None:
        for request_id in step.finished_request_ids:
            self.states.pop(request_id, None)
        for new in step.new_requests:
            self.states[new.request_id] = SamplingState(
                params=new.sampling_params,
                prompt_token_ids=new.prompt_token_ids,
                output_token_ids=list(new.output_token_ids),
                eos_token_id=new.eos_token_id,
            )

    def _prompt_logprob_rows(
        self, step: SchedulerOutput, starts: list[int]
    ) -> list[_PromptPositions]:
        wanted = []
        for item, row0 in zip(step.scheduled, starts):
            state = self.states[item.request_id]
            k = state.params.prompt_logprobs
            prompt_len = len(state.prompt_token_ids)
            if k is None or item.num_computed_tokens >= prompt_len:
                continue
            span = range(item.num_computed_tokens, item.num_computed_tokens + len(item.token_ids))
            positions = [p for p in span if p + 1 < prompt_len]
            wanted.append(_PromptPositions(
                item.request_id,
                [row0 + p - item.num_computed_tokens for p in positions],
                [state.prompt_token_ids[p + 1] for p in positions],
                k,
            ))
        return wanted

    def _fill_in_flight_tokens(self, step: SchedulerOutput, inputs: StepInputs) -> None:
        """Replace placeholders (tokens the previous step sampled) by their ids, on the device."""
        targets, sources = [], []
        for item, end in zip(step.scheduled, inputs.metadata.query_start_loc_cpu[1:]):
            if item.token_ids[-1] == PLACEHOLDER_TOKEN_ID:
                targets.append(end - 1)
                sources.append(self._last_rows[item.request_id])
        if not targets:
            return
        assert self._last_sampled is not None
        index = torch.tensor(sources, dtype=torch.int64).to(self.device, non_blocking=True)
        where = torch.tensor(targets, dtype=torch.int64).to(self.device, non_blocking=True)
        inputs.input_ids.index_copy_(0, where, self._last_sampled.index_select(0, index))

    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        if self.graphs is not None and self.graphs.can_run(inputs):
            return self.graphs.run(inputs)
        metadata = self.builder.build(inputs.metadata)
        return self.model(inputs.input_ids, inputs.positions, self.kv_caches, metadata)

    @torch.inference_mode()
    def execute_model(self, step: SchedulerOutput) -> PendingStepOutput:
        self._update_states(step)
        if step.is_empty:
            return PendingStepOutput([], None, None)
        inputs = build_step_inputs(step.scheduled, self.block_size, self.device)
        self._fill_in_flight_tokens(step, inputs)
        hidden = self._forward(inputs)

        pinned = self.device_is_async
        rows, sampled, logprobs = [], None, None
        sampling = [(item, row) for item, row in zip(step.scheduled, inputs.last_token_index)
                    if item.sample]
        if sampling:
            index = torch.tensor([row for _, row in sampling], dtype=torch.int64)
            logits = self.model.compute_logits(hidden[index.to(self.device, non_blocking=True)])
            for item, _ in sampling:
                state = self.states[item.request_id]
                rows.append(SampledRow(item.request_id, state, len(state.output_token_ids)))
            out = self.sampler(logits, [row.state for row in rows])
            for row in rows:  # seeded draws and min_tokens count the token being sampled
                row.state.output_token_ids.append(PLACEHOLDER_TOKEN_ID)
            self._last_sampled = out.sampled_token_ids
            self._last_rows = {row.request_id: i for i, row in enumerate(rows)}
            sampled = copy_to_host(out.sampled_token_ids, pinned)
            if out.logprobs is not None:
                logprobs = type(out.logprobs)(*(copy_to_host(t, pinned) for t in out.logprobs))

        pending = PendingStepOutput(rows, sampled, logprobs)
        starts = inputs.metadata.query_start_loc_cpu[:-1]
        for want in self._prompt_logprob_rows(step, starts):
            if not want.rows:
                pending.prompt_logprobs.append(PromptLogprobRows(want.request_id, None))
                continue
            logits = self.model.compute_logits(hidden[torch.tensor(want.rows, device=self.device)])
            targets = torch.tensor(want.targets, device=self.device)
            plp = compute_prompt_logprobs(logits, targets, want.k)
            pending.prompt_logprobs.append(PromptLogprobRows(
                want.request_id, type(plp)(*(copy_to_host(t, pinned) for t in plp))))
        if pinned:
            pending.event = torch.Event(device=self.device)
            pending.event.record()
        return pending
