"""Runs one scheduled step of a generating model: flatten, forward, logits, sample, all
on the device.

`execute_model` launches the step and returns at once where the device runs
asynchronously; the host reads the sampled ids only when the engine asks for the result.
A token still in flight from the previous step (the scheduler's placeholder) is taken
from that step's sampled ids on the device. Under pipeline parallelism only the last
stage computes logits and samples.

A step scheduled while the previous one is in flight may get its grammars' token bitmask
later (`grammar_bitmask_later`): its forward is issued at once and its sampling waits for
`provide_token_bitmask`, so the host fills the bitmask while the device runs the forward.

A step that verifies a request's draft tokens (speculative decoding) samples at each
draft position too, and replaces each draft position's draw by the rejection-sampling
outcome (`Sampler.verify`); the host keeps the drafts that match it
(`pagoda.spec.accepted_tokens`). With a draft model (`drafter`) the drafts are the
scheduler's placeholders: the draft model proposes them on the device before the forward.

Where platforms differ, the runner asks the platform (beside what `StepRunner` asks): what
to do once the step is issued (`after_forward`) and whether to sample on the host
(`samples_on_host`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pagoda.attention.backend import AttentionMetadataBuilder
from pagoda.engine.request import PLACEHOLDER_TOKEN_ID
from pagoda.engine.scheduler_output import ScheduledRequest, SchedulerOutput, StepResult
from pagoda.lora.manager import LoRAManager
from pagoda.platforms.platform import Platform
from pagoda.platforms.step_padding import StepPadding
from pagoda.sample import Sampler, SamplingState, compute_prompt_logprobs
from pagoda.structured.engine import GrammarBitmask
from pagoda.worker.decode_graphs import DecodeGraphs, replay
from pagoda.worker.draft_runner import DraftProposals, DraftRunner
from pagoda.worker.step_inputs import StepInputs, build_step_inputs
from pagoda.worker.step_result import (
    AwaitingBitmask,
    PendingStepOutput,
    PromptLogprobRows,
    SampledRow,
    copy_to_host,
)
from pagoda.worker.step_runner import StepRunner


@dataclass
class _PromptPositions:
    request_id: str
    rows: list[int]
    targets: list[int]
    k: int


class ModelRunner(StepRunner):
    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[torch.Tensor],
        builder: AttentionMetadataBuilder,
        block_size: int,
        vocab_size: int,
        device: torch.device,
        platform: Platform,
        padding: StepPadding | None = None,
        seed: int = 0,
    ):
        super().__init__(model, kv_caches, builder, block_size, device, platform, padding)
        self.vocab_size = vocab_size
        self.sample_device = torch.device("cpu") if platform.samples_on_host else device
        self.sampler = Sampler(device=self.sample_device, seed=seed)
        self.states: dict[str, SamplingState] = {}
        self.graphs: list[DecodeGraphs] = []
        """Captured steps, tried in order: plain decode steps, then verify steps."""
        self._last_sampled: torch.Tensor | None = None
        """The previous step's sampled ids, on the device."""
        self._last_rows: dict[str, int] = {}
        """Request id -> its row in `_last_sampled`."""
        self._awaiting: AwaitingBitmask | None = None
        """The launched step that samples once its token bitmask comes."""
        self.drafter: DraftRunner | None = None
        """The draft model (speculative_method draft)."""
        self.lora: LoRAManager | None = None
        """The LoRA adapters' slots, where LoRA is on."""

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

    def _fill_in_flight_tokens(self, scheduled: list[ScheduledRequest],
                               inputs: StepInputs) -> None:
        """Replace placeholders (tokens the previous step sampled) by their ids, on the
        device (drafts, a draft model's placeholders, are not: no token of their request is
        in flight)."""
        targets, sources = [], []
        for item, end in zip(scheduled, inputs.metadata.query_start_loc_cpu[1:]):
            if not item.draft_token_ids and item.token_ids[-1] == PLACEHOLDER_TOKEN_ID:
                targets.append(end - 1)
                sources.append(self._last_rows[item.request_id])
        if not targets:
            return
        assert self._last_sampled is not None
        index = torch.tensor(sources, dtype=torch.int64).to(self.device, non_blocking=True)
        where = torch.tensor(targets, dtype=torch.int64).to(self.device, non_blocking=True)
        inputs.input_ids.index_copy_(0, where, self._last_sampled.index_select(0, index))

    def _place_drafts(self, step: SchedulerOutput, inputs: StepInputs,
                      proposals: DraftProposals) -> None:
        """Put the draft model's drafts where the step has their placeholders."""
        ends = inputs.metadata.query_start_loc_cpu[1:]
        rows = [r for item, end in zip(step.scheduled, ends)
                for r in range(end - len(item.draft_token_ids), end)]
        where = torch.tensor(rows, dtype=torch.int64).to(self.device, non_blocking=True)
        inputs.input_ids.index_copy_(0, where, proposals.tokens)

    def _forward(self, inputs: StepInputs, **model_inputs: Any) -> torch.Tensor | None:
        hidden = replay(self.graphs, inputs)
        return hidden if hidden is not None else super()._forward(inputs, **model_inputs)

    def _gather_logits(self, hidden: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Logits [len(rows), V] of those rows of hidden states, on the sampling device;
        the gather is padded like the step (`StepPadding.rows`)."""
        n = len(rows)
        if self.padding is not None:
            rows = rows + [0] * (self.padding.rows(n) - n)
        index = torch.tensor(rows, dtype=torch.int64).to(self.device, non_blocking=True)
        return self.model.compute_logits(hidden[index])

    def _to_sampler(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        return logits.to(self.sample_device)[:n]

    @staticmethod
    def _token_bitmask(grammars: GrammarBitmask | None, index: dict[str, int],
                       pinned: bool) -> tuple[list[int], torch.Tensor] | None:
        """The step's grammar bitmask with the sampler's row of each of its requests
        (`index`); with `pinned`, staged in pinned memory so that its copy to the device
        does not wait for the work queued before it (a forward still running)."""
        if grammars is None:
            return None
        bitmask = grammars.bitmask
        if pinned:
            bitmask = torch.empty(bitmask.shape, dtype=bitmask.dtype,
                                  pin_memory=True).copy_(bitmask)
        return [index[r] for r in grammars.request_ids], bitmask

    def _execute(self, step: SchedulerOutput) -> PendingStepOutput | AwaitingBitmask:
        self._update_states(step)
        if step.is_empty:
            return PendingStepOutput([], None, None)
        inputs = build_step_inputs(step.scheduled, self.block_size, self.device, self.padding)
        if self.lora is not None:
            self.lora.prepare(step, inputs.shape.num_tokens)
        self._fill_in_flight_tokens(step.scheduled, inputs)
        proposals = None
        if self.drafter is not None:
            proposals = self.drafter.propose(step, self.states, self._fill_in_flight_tokens)
            if proposals is not None:
                self._place_drafts(step, inputs, proposals)
        hidden = self._forward(inputs)
        if hidden is None:  # an earlier pipeline stage: the last one samples
            self.platform.after_forward()
            return PendingStepOutput([], None, None)
        sampling = [(item, row) for item, row in zip(step.scheduled, inputs.last_token_index)
                    if item.sample]
        logits = self._gather_logits(hidden, [
            r for item, row in sampling for r in range(row - len(item.draft_token_ids), row + 1)
        ]) if sampling else None
        self.platform.after_forward()
        if step.grammar_bitmask_later:
            self._awaiting = AwaitingBitmask(lambda bitmask: self._sample(
                step, inputs, hidden, sampling, logits, bitmask, proposals))
            return self._awaiting
        return self._sample(step, inputs, hidden, sampling, logits, step.grammar_bitmask,
                            proposals)

    def _verify(self, rows: list[SampledRow], first: dict[str, int],
                states: list[SamplingState], logits: torch.Tensor, drawn: torch.Tensor,
                proposals: DraftProposals | None) -> torch.Tensor:
        """The step's draws with each draft position's replaced by the outcome of its
        draft's verification (`Sampler.verify`); the draws themselves without drafts."""
        draft_rows = [first[row.request_id] + j for row in rows for j in range(len(row.drafts))]
        if not draft_rows:
            return drawn
        index = torch.tensor(draft_rows, dtype=torch.int64).to(self.sample_device,
                                                               non_blocking=True)
        if proposals is None:  # a deterministic proposer's, known on the host
            drafts = torch.tensor([d for row in rows for d in row.drafts], dtype=torch.int64)
            drafts, probs = drafts.to(self.sample_device, non_blocking=True), None
        else:
            drafts, probs = proposals.tokens.to(self.sample_device), proposals.probs
        verified = self.sampler.verify(logits.index_select(0, index),
                                       [states[r] for r in draft_rows], drafts, probs,
                                       drawn.index_select(0, index))
        return drawn.index_copy(0, index, verified)

    def provide_token_bitmask(self, bitmask: GrammarBitmask | None) -> StepResult:
        """The bitmask the launched step (`grammar_bitmask_later`) samples with; it samples
        now. The step's result, or an empty one on a stage that does not sample."""
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is None:
            return PendingStepOutput([], None, None)
        grad_mode = torch.inference_mode if self.platform.uses_inference_mode else torch.no_grad
        with grad_mode():
            return awaiting.provide(bitmask)

    def _sample(self, step: SchedulerOutput, inputs: StepInputs, hidden: torch.Tensor,
                sampling: list[tuple[ScheduledRequest, int]], logits: torch.Tensor | None,
                bitmask: GrammarBitmask | None,
                proposals: DraftProposals | None = None) -> PendingStepOutput:
        pinned = self.platform.executes_asynchronously
        rows, sampled, logprobs, drafts = [], None, None, None
        if logits is not None:
            for item, _ in sampling:
                state = self.states[item.request_id]
                rows.append(SampledRow(item.request_id, state, len(state.output_token_ids),
                                       item.draft_token_ids))
            states = [s for row in rows for s in row.draw_states()]
            # Each request's first row in the sampler's batch (its drafts' rows follow it).
            first = dict(zip((row.request_id for row in rows),
                             itertools.accumulate((row.num_draws for row in rows[:-1]),
                                                  initial=0)))
            logits = self._to_sampler(logits, len(states))
            out = self.sampler(logits, states, self._token_bitmask(bitmask, first, pinned))
            draws = self._verify(rows, first, states, logits, out.sampled_token_ids, proposals)
            for row in rows:  # seeded draws and min_tokens count the token being sampled
                row.state.output_token_ids.append(PLACEHOLDER_TOKEN_ID)
            self._last_sampled = draws
            self._last_rows = first
            sampled = copy_to_host(draws, pinned)
            if proposals is not None:
                drafts = copy_to_host(proposals.tokens, pinned)
            if out.logprobs is not None:
                logprobs = type(out.logprobs)(*(copy_to_host(t, pinned) for t in out.logprobs))

        pending = PendingStepOutput(rows, sampled, logprobs, drafts=drafts)
        starts = inputs.metadata.query_start_loc_cpu[:-1]
        for want in self._prompt_logprob_rows(step, starts):
            if not want.rows:
                pending.prompt_logprobs.append(PromptLogprobRows(want.request_id, None))
                continue
            logits = self._to_sampler(self._gather_logits(hidden, want.rows), len(want.rows))
            targets = torch.tensor(want.targets, device=self.sample_device)
            plp = compute_prompt_logprobs(logits, targets, want.k)
            pending.prompt_logprobs.append(PromptLogprobRows(
                want.request_id, type(plp)(*(copy_to_host(t, pinned) for t in plp))))
        if pinned:
            pending.event = torch.Event(device=self.device)
            pending.event.record()
        return pending
