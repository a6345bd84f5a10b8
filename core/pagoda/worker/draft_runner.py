"""The draft model of speculative decoding (`speculative_method` draft), run in the
target's worker before the target's forward.

Its KV cache has its own tensors indexed by the target's block tables (same block size,
same block ids), so the scheduler's KV cache manager owns the blocks of both. The cache
mirrors the target's: each step the draft first computes the tokens the target computes
(every request's, prefill chunks included, so that a prefix-cache hit or a fork finds the
draft's KV too), and before them the tokens the draft has not seen yet (the last draft of
a fully accepted run, which the draft proposed but never computed). From the last of them
it proposes a speculative request's drafts one forward at a time, drawing from the
request's processed distribution; the drafts and their distributions stay on the device
for the target's verification (`Sampler.verify`). Positions past what the target accepts
are simply computed again later, overwriting their KV in both caches.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from pagoda.attention.backend import AttentionBackend, AttentionMetadataBuilder, KVCacheSpec
from pagoda.engine.scheduler_output import ScheduledRequest, SchedulerOutput
from pagoda.platforms.step_padding import StepPadding
from pagoda.sample import Sampler, SamplingState
from pagoda.worker.decode_graphs import DecodeGraphs, replay
from pagoda.worker.kv_caches import allocate_kv_caches
from pagoda.worker.step_inputs import StepInputs, build_step_inputs
from pagoda.worker.step_result import SampledRow


@dataclass
class DraftModel:
    """The loaded draft model, with what its KV cache is made of."""

    model: nn.Module
    attn_backend: type[AttentionBackend]
    kv_spec: KVCacheSpec

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of its cache, all layers."""
        return self.kv_spec.block_bytes * self.model.num_attention_layers

    def runner(self, num_blocks: int, device: torch.device, sampler: Sampler,
               sample_device: torch.device, padding: StepPadding | None) -> DraftRunner:
        """Its runner, with a cache of `num_blocks` blocks (the target's count)."""
        caches = allocate_kv_caches(self.attn_backend, self.kv_spec, num_blocks,
                                    self.model.num_attention_layers, device)
        builder = self.attn_backend.get_builder_cls()(self.kv_spec, device)
        return DraftRunner(self.model, caches, builder, self.kv_spec.block_size, device,
                           sampler, sample_device, padding)


@dataclass
class DraftProposals:
    """One step's drafts, request after request in scheduled order (each request's in
    order), on the device."""

    tokens: torch.Tensor
    """[N] int64 on the model's device."""
    probs: torch.Tensor | None
    """[N, V] float32 on the sampling device: the distribution each was drawn from (None:
    every speculative request is greedy, its drafts are the draft model's argmax)."""


@dataclass
class _Proposing:
    """A speculative request of the step: its drafts' count, the position of its last
    token, and the sampling state of each draft's position."""

    item: ScheduledRequest
    k: int
    last_position: int
    states: list[SamplingState]


class DraftRunner:
    def __init__(self, model: nn.Module, kv_caches: list[torch.Tensor],
                 builder: AttentionMetadataBuilder, block_size: int, device: torch.device,
                 sampler: Sampler, sample_device: torch.device,
                 padding: StepPadding | None = None):
        """`sampler`: the target's (its engine-wide generator draws unseeded rows)."""
        self.model = model
        self.kv_caches = kv_caches
        self.builder = builder
        self.block_size = block_size
        self.device = device
        self.sampler = sampler
        self.sample_device = sample_device
        self.padding = padding
        self.computed: dict[str, int] = {}
        """Request id -> positions whose KV the draft's cache holds."""
        self.graphs: list[DecodeGraphs] = []
        """Its forwards replayed from device graphs, tried in order: those of one token a
        request (the proposing ones after the first, and a first one with nothing to
        catch up), then those of a few (a first one catching up)."""

    def propose(self, step: SchedulerOutput, states: dict[str, SamplingState],
                fill_in_flight: Callable[[list[ScheduledRequest], StepInputs], None]
                ) -> DraftProposals | None:
        """Compute the step's tokens in the draft's cache and propose the drafts of its
        speculative requests (None when it has none). `states`: the runner's sampling
        states, whose tokens are all known on the host for speculative requests;
        `fill_in_flight`: fills the placeholders of tokens still in flight (other
        requests') on the device."""
        for request_id in step.finished_request_ids:
            self.computed.pop(request_id, None)
        items, proposing = [], []
        for item in step.scheduled:
            k = len(item.draft_token_ids)
            start = item.num_computed_tokens
            seen = min(self.computed.get(item.request_id, start), start)
            state = states[item.request_id]
            unseen = (state.prompt_token_ids + state.output_token_ids)[seen:start]
            token_ids = unseen + item.token_ids[: len(item.token_ids) - k]
            items.append(replace(item, num_computed_tokens=seen, token_ids=token_ids,
                                 draft_token_ids=[]))
            last = seen + len(token_ids) - 1
            # Computed: up to its last token, and the drafts but the last (each proposes
            # the next).
            self.computed[item.request_id] = last + max(k, 1)
            if k:
                row = SampledRow(item.request_id, state, len(state.output_token_ids),
                                 item.draft_token_ids)
                proposing.append(_Proposing(item, k, last, row.draw_states()[:k]))
        inputs = build_step_inputs(items, self.block_size, self.device, self.padding)
        fill_in_flight(items, inputs)
        hidden = self._forward(inputs)
        if not proposing:
            return None
        index = {item.request_id: i for i, item in enumerate(items)}
        rows = [inputs.last_token_index[index[p.item.request_id]] for p in proposing]
        return self._draw_drafts(proposing, hidden[self._index(rows)])

    def _draw_drafts(self, proposing: list[_Proposing], hidden: torch.Tensor) -> DraftProposals:
        """Draw draft j of every request that wants more than j, j = 0, 1, ..., from the
        hidden states at the position before it (`hidden`: those of draft 0)."""
        tokens: list[torch.Tensor] = []  # [j]: drafts j of the requests in rows[j]
        probs: list[torch.Tensor | None] = []
        rows: list[dict[int, int]] = []  # [j]: request (index in proposing) -> its row
        active = list(range(len(proposing)))
        for j in range(max(p.k for p in proposing)):
            if j:
                before = self._index([rows[-1][i] for i in active])
                hidden = self._forward_one(proposing, active, j, tokens[-1][before])
            logits = self.model.compute_logits(hidden).to(self.sample_device)
            token, q = self.sampler.propose(logits, [proposing[i].states[j] for i in active])
            tokens.append(token.to(self.device))
            probs.append(q)
            rows.append({i: n for n, i in enumerate(active)})
            active = [i for i in active if proposing[i].k > j + 1]
        starts = list(itertools.accumulate((len(t) for t in tokens), initial=0))
        order = self._index([starts[j] + rows[j][i] for i, p in enumerate(proposing)
                             for j in range(p.k)])
        q_all = None
        if any(q is not None for q in probs):
            vocab = next(q for q in probs if q is not None).shape[1]
            q_all = torch.cat([q if q is not None else  # all greedy: q unused
                               torch.zeros(len(t), vocab, device=self.sample_device)
                               for q, t in zip(probs, tokens)])[order.to(self.sample_device)]
        return DraftProposals(torch.cat(tokens)[order], q_all)

    def _index(self, values: list[int]) -> torch.Tensor:
        """int64 `values` on the device, copied without waiting for the work queued."""
        return torch.tensor(values, dtype=torch.int64).to(self.device, non_blocking=True)

    def _forward_one(self, proposing: list[_Proposing], active: list[int], j: int,
                     previous: torch.Tensor) -> torch.Tensor:
        """Hidden states after draft j - 1 (`previous`, one per active request), computed
        at its position."""
        items = [ScheduledRequest(proposing[i].item.request_id,
                                  proposing[i].last_position + j, [0],
                                  proposing[i].item.block_ids, True) for i in active]
        inputs = build_step_inputs(items, self.block_size, self.device, self.padding)
        inputs.input_ids[: len(items)] = previous
        return self._forward(inputs)[: len(items)]

    def _forward(self, inputs: StepInputs) -> torch.Tensor:
        hidden = replay(self.graphs, inputs)
        if hidden is not None:
            return hidden
        return self.model(inputs.input_ids, inputs.positions, self.kv_caches,
                          self.builder.build(inputs.metadata))
