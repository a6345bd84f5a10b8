"""The sampler: processed logits -> one token per request, on the logits' device.

No host synchronisation happens here: results stay tensors until the caller copies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pagoda.ops import OpTable, current_ops
from pagoda.ops.reference import sampling_uniforms
from pagoda.sample.batch import SamplingBatch
from pagoda.sample.logprobs import LogprobsTensors, compute_logprobs
from pagoda.sample.processors import apply_logits_processors
from pagoda.sample.state import SamplingState
from pagoda.sample.token_counts import TokenCounts
from pagoda.sample.top_k_top_p import apply_min_p, apply_top_k, apply_top_k_top_p
from pagoda.spec.verify import verified_draws

_DRAFT_SALT = 0x5DEECE66D
"""XORed into a draft model's draw seeds (see `Sampler.propose`)."""
_ACCEPT_SALT = 0x2545F4914F6CDD1D
"""XORed into the seeds of the acceptance draws (see `Sampler.verify`)."""


def _probabilities(logits: Tensor, temperature: Tensor) -> Tensor:
    """softmax(logits / temperature) per row, float32 (rows at temperature 0: of the logits,
    unused)."""
    return (logits.float() / torch.where(temperature > 0, temperature, 1.0).unsqueeze(1)
            ).softmax(dim=-1)


@dataclass(frozen=True)
class SamplerOutput:
    sampled_token_ids: Tensor  # [B] int64
    logprobs: LogprobsTensors | None  # raw-logit logprobs, when any request asked


class Sampler:
    """Samples a batch of requests with different parameters.

    The draw is the `sample_from_logits` op of the platform's op table (the reference
    where none is registered), given per-row seeds and draw numbers: a seeded request's
    draw depends only on its seed and output length (the same alone, in any batch, after
    recompute); unseeded rows get fresh seeds from the engine-wide generator seeded by
    `seed`, on the device.
    """

    def __init__(self, device: torch.device | str = "cpu", seed: int | None = None,
                 ops: OpTable | None = None) -> None:
        """`ops` defaults to the current op table (`pagoda.ops.use_ops`)."""
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)
        ops = ops or current_ops()
        self._sample_from_logits = ops.sample_from_logits
        self._apply_token_bitmask = ops.apply_token_bitmask
        self._token_counts: TokenCounts | None = None

    def __call__(self, logits: Tensor, states: Sequence[SamplingState],
                 token_bitmask: tuple[list[int], Tensor] | None = None) -> SamplerOutput:
        """Sample one token per row of logits [B, V] for the requests `states`;
        `token_bitmask`: (rows, bitmask [len(rows), W]) of the rows a grammar constrains."""
        return self.sample(logits, self._batch(logits, states, token_bitmask))

    def _batch(self, logits: Tensor, states: Sequence[SamplingState],
               token_bitmask: tuple[list[int], Tensor] | None = None) -> SamplingBatch:
        vocab_size = logits.shape[-1]
        counts = self._token_counts
        if counts is None or (counts.vocab_size, counts.device) != (vocab_size, logits.device):
            counts = self._token_counts = TokenCounts(vocab_size, logits.device)
        return SamplingBatch.from_states(states, vocab_size, logits.device, counts,
                                         token_bitmask)

    def sample(self, logits: Tensor, batch: SamplingBatch) -> SamplerOutput:
        """Like calling the sampler, with the step's batch already built."""
        raw = logits
        logits = self._processed(logits, batch)
        sampled = logits.argmax(dim=-1) if batch.all_greedy else self._random(logits, batch)
        logprobs = None
        if batch.max_num_logprobs is not None:
            logprobs = compute_logprobs(raw, sampled, batch.max_num_logprobs)
        return SamplerOutput(sampled, logprobs)

    def propose(self, logits: Tensor, states: Sequence[SamplingState]
                ) -> tuple[Tensor, Tensor | None]:
        """A draft model's draws: per row a token of its request's processed distribution q,
        and q [B, V] (None when every row is greedy: a greedy row proposes its argmax, and
        its verification needs no q). The draws' seeds are salted: a seeded request's
        drafts are reproducible, and independent of its verification's draws."""
        batch = self._batch(logits, states)
        logits = self._processed(logits, batch)
        if batch.all_greedy:
            return logits.argmax(dim=-1), None
        logits, temperature = self._truncated(logits, batch)
        assert batch.offsets is not None
        tokens = self._sample_from_logits(logits, temperature, self._seeds(batch) ^ _DRAFT_SALT,
                                          batch.offsets)
        return tokens, _probabilities(logits, temperature)

    def verify(self, logits: Tensor, states: Sequence[SamplingState], drafts: Tensor,
               draft_probs: Tensor | None, drawn: Tensor) -> Tensor:
        """Per draft position (row of logits [N, V], the target's), the token that decides
        its draft (`pagoda.spec.verify.verified_draws`): the draft when accepted, else the
        token drawn instead. `draft_probs`: the draft model's q [N, V] (None: a
        deterministic proposer's, one-hot); `drawn`: the rows' plain draws, kept on greedy
        rows (their argmax). A seeded row's acceptance and redraw depend on its seed and
        draw number only."""
        batch = self._batch(logits, states)
        if batch.all_greedy:
            return drawn
        logits, temperature = self._truncated(self._processed(logits, batch), batch)
        assert batch.offsets is not None
        offsets, seeds = batch.offsets, self._seeds(batch)
        uniforms = sampling_uniforms(seeds ^ _ACCEPT_SALT, offsets, 1).squeeze(1)
        ones = torch.ones_like(temperature)
        verified = verified_draws(
            _probabilities(logits, temperature), drafts, draft_probs, uniforms,
            lambda weights: self._sample_from_logits(weights.log(), ones, seeds, offsets))
        return drawn.where(temperature == 0, verified)

    def _processed(self, logits: Tensor, batch: SamplingBatch) -> Tensor:
        """The logits after the grammar's bitmask and the logits processors (a float32
        copy), or `logits` itself when none applies."""
        if not batch.needs_processing:
            return logits
        logits = logits.to(torch.float32, copy=True)
        if batch.token_bitmask is not None:  # first: the grammar's tokens are the choice
            rows, bitmask = batch.token_bitmask
            if rows is None:  # every row: no gather and scatter
                logits = self._apply_token_bitmask(logits, bitmask)
            else:
                logits[rows] = self._apply_token_bitmask(logits[rows], bitmask)
        apply_logits_processors(logits, batch)
        return logits

    def _truncated(self, logits: Tensor, batch: SamplingBatch) -> tuple[Tensor, Tensor]:
        """Top-k, top-p and min-p (the latter two of the temperature-scaled distribution):
        the logits and the temperature to draw them at (0 on greedy rows)."""
        temperature = batch.temperature
        assert temperature is not None
        if batch.top_p is not None or batch.min_p is not None:
            random = temperature > 0
            logits = logits.float() / torch.where(random, temperature, 1.0).unsqueeze(1)
            temperature = random.float()
        if batch.top_p is not None:
            logits = apply_top_k_top_p(logits, batch.top_k, batch.top_p)
        elif batch.top_k is not None:
            logits = apply_top_k(logits, batch.top_k, batch.max_top_k)
        if batch.min_p is not None:
            logits = apply_min_p(logits, batch.min_p)
        return logits, temperature

    def _random(self, logits: Tensor, batch: SamplingBatch) -> Tensor:
        """The truncated distribution's draw by the op (argmax on greedy rows, whose
        temperature is 0)."""
        logits, temperature = self._truncated(logits, batch)
        assert batch.offsets is not None
        return self._sample_from_logits(logits, temperature, self._seeds(batch), batch.offsets)

    def _seeds(self, batch: SamplingBatch) -> Tensor:
        """Each row's seed: its own on seeded rows, else drawn from the engine generator."""
        if not batch.any_unseeded:
            assert batch.seeds is not None
            return batch.seeds
        drawn = torch.empty(len(batch.offsets), dtype=torch.int64, device=self.device)
        drawn.random_(generator=self.generator)
        if batch.seeds is None:
            return drawn
        return torch.where(batch.seeded, batch.seeds, drawn)
