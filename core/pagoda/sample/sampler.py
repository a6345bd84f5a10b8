"""The sampler: processed logits -> one token per request, on the logits' device.

No host synchronisation happens here: results stay tensors until the caller copies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pagoda.sample.batch import SamplingBatch
from pagoda.sample.logprobs import LogprobsTensors, compute_logprobs
from pagoda.sample.processors import apply_logits_processors
from pagoda.sample.state import SamplingState
from pagoda.sample.top_k_top_p import apply_min_p, apply_top_k, apply_top_k_top_p


@dataclass(frozen=True)
class SamplerOutput:
    sampled_token_ids: Tensor  # [B] int64
    logprobs: LogprobsTensors | None  # raw-logit logprobs, when any request asked


class Sampler:
    """Samples a batch of requests with different parameters.

    Randomness is stateless per request: a seeded request's draw depends only on its
    seed and output length (the same alone, in any batch, after recompute); unseeded
    requests share the engine-wide generator seeded by `seed`.
    """

    def __init__(self, device: torch.device | str = "cpu", seed: int | None = None) -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        self._seeded_generator = torch.Generator(self.device)

    def __call__(self, logits: Tensor, states: Sequence[SamplingState]) -> SamplerOutput:
        """Sample one token per row of logits [B, V] for the requests `states`."""
        return self.sample(logits, SamplingBatch.from_states(states, logits.shape[-1],
                                                             logits.device))

    def sample(self, logits: Tensor, batch: SamplingBatch) -> SamplerOutput:
        """Like calling the sampler, with the step's batch already built."""
        raw = logits
        if batch.needs_processing:
            logits = logits.to(torch.float32, copy=True)
            apply_logits_processors(logits, batch)
        if batch.all_greedy:
            sampled = logits.argmax(dim=-1)
        else:
            sampled = self._random(logits, batch)
            if batch.greedy_rows is not None:
                sampled = torch.where(batch.greedy_rows, logits.argmax(dim=-1), sampled)
        logprobs = None
        if batch.max_num_logprobs is not None:
            logprobs = compute_logprobs(raw, sampled, batch.max_num_logprobs)
        return SamplerOutput(sampled, logprobs)

    def _random(self, logits: Tensor, batch: SamplingBatch) -> Tensor:
        """Temperature, top-k, top-p, min-p, then an exponential race: argmax(p / q)
        with q ~ Exp(1) is a draw from p."""
        logits = logits.float() / batch.temperature
        if batch.top_p is not None:
            logits = apply_top_k_top_p(logits, batch.top_k, batch.top_p)
        elif batch.top_k is not None:
            logits = apply_top_k(logits, batch.top_k, batch.max_top_k)
        if batch.min_p is not None:
            logits = apply_min_p(logits, batch.min_p)
        probs = logits.softmax(dim=-1)
        q = torch.empty_like(probs)
        if batch.any_unseeded:
            q.exponential_(generator=self.generator)
        else:
            q.fill_(1.0)
        for row, seed in batch.seeded:
            q[row].exponential_(generator=self._seeded_generator.manual_seed(seed))
        # q == 0 would turn masked tokens (p == 0) into NaN, which argmax picks.
        q.clamp_(min=torch.finfo(q.dtype).tiny)
        return probs.div_(q).argmax(dim=-1)
