"""Runs one scheduled step: flatten, forward, logits, sample, all on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadataBuilder
from pagoda.engine.scheduler_output import (
    ModelRunnerOutput,
    SchedulerOutput,
    TokenLogprobs,
)
from pagoda.sample import Sampler, SamplingState, compute_prompt_logprobs
from pagoda.worker.step_inputs import build_step_inputs


@dataclass
class _PromptLogprobRows:
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
    ):
        self.model = model
        self.kv_caches = kv_caches
        self.builder = builder
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device = device
        self.sampler = Sampler(device=device, seed=seed)
        self.states: dict[str, SamplingState] = {}

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
    ) -> list[_PromptLogprobRows]:
        wanted = []
        for item, row0 in zip(step.scheduled, starts):
            state = self.states[item.request_id]
            k = state.params.prompt_logprobs
            prompt_len = len(state.prompt_token_ids)
            if k is None or item.num_computed_tokens >= prompt_len:
                continue
            span = range(item.num_computed_tokens, item.num_computed_tokens + len(item.token_ids))
            positions = [p for p in span if p + 1 < prompt_len]
            wanted.append(_PromptLogprobRows(
                item.request_id,
                [row0 + p - item.num_computed_tokens for p in positions],
                [state.prompt_token_ids[p + 1] for p in positions],
                k,
            ))
        return wanted

    @torch.inference_mode()
    def execute_model(self, step: SchedulerOutput) -> ModelRunnerOutput:
        self._update_states(step)
        result = ModelRunnerOutput()
        if step.is_empty:
            return result
        inputs = build_step_inputs(step.scheduled, self.block_size, self.device)
        metadata = self.builder.build(inputs.metadata)
        hidden = self.model(inputs.input_ids, inputs.positions, self.kv_caches, metadata)

        sampling = [(item, row) for item, row in zip(step.scheduled, inputs.last_token_index)
                    if item.sample]
        if sampling:
            rows = torch.tensor([row for _, row in sampling], device=self.device)
            logits = self.model.compute_logits(hidden[rows])
            states = [self.states[item.request_id] for item, _ in sampling]
            out = self.sampler(logits, states)
            tokens = out.sampled_token_ids.tolist()
            lp = None
            if out.logprobs is not None:
                lp = out.logprobs.tolists([s.params.logprobs or 0 for s in states])
            for i, ((item, _), token) in enumerate(zip(sampling, tokens)):
                states[i].output_token_ids.append(token)
                result.sampled[item.request_id] = token
                if lp is not None and states[i].params.logprobs is not None:
                    result.logprobs[item.request_id] = TokenLogprobs(
                        lp.token_ids[i], lp.logprobs[i], lp.ranks[i])

        starts = inputs.metadata.query_start_loc_cpu[:-1]
        for want in self._prompt_logprob_rows(step, starts):
            if not want.rows:
                result.prompt_logprobs[want.request_id] = []
                continue
            logits = self.model.compute_logits(hidden[torch.tensor(want.rows, device=self.device)])
            targets = torch.tensor(want.targets, device=self.device)
            plp = compute_prompt_logprobs(logits, targets, want.k).tolists()
            result.prompt_logprobs[want.request_id] = [
                TokenLogprobs(ids, lps, rank)
                for ids, lps, rank in zip(plp.token_ids, plp.logprobs, plp.ranks)
            ]
        return result
