"""SamplingBatch: one step's per-request sampling parameters as device tensors.

Built once per step from the requests' `SamplingState`s. Anything no request asked
for is None, so the sampler skips it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pagoda.sample.state import SamplingState


def _tensor(data: Sequence, dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor(data, dtype=dtype).to(device, non_blocking=True)


def _padded(rows: list[list[int]], pad: int, device: torch.device) -> Tensor:
    width = max(len(r) for r in rows)
    return _tensor([r + [pad] * (width - len(r)) for r in rows], torch.int64, device)


@dataclass(frozen=True)
class TokenEntries:
    """Sparse (row, token id[, value]) entries of a [B, V] tensor."""

    rows: Tensor
    cols: Tensor
    values: Tensor | None = None

    @classmethod
    def build(cls, entries: list[tuple], device: torch.device) -> TokenEntries | None:
        if not entries:
            return None
        rows, cols, *values = zip(*entries, strict=True)
        return cls(_tensor(rows, torch.int64, device), _tensor(cols, torch.int64, device),
                   _tensor(values[0], torch.float32, device) if values else None)


@dataclass(frozen=True)
class Penalties:
    """Penalties of the rows that have any; `rows` index the batch, the rest is [P, ...]."""

    rows: Tensor
    output_counts: Tensor  # [P, V] float32: occurrences of each token in the output
    repetition: Tensor | None  # [P, 1]
    seen_in_prompt: Tensor | None  # [P, V] bool; with `repetition` only
    frequency: Tensor | None  # [P, 1]
    presence: Tensor | None  # [P, 1]

    @classmethod
    def build(cls, states: Sequence[SamplingState], vocab_size: int,
              device: torch.device) -> Penalties | None:
        rows = [i for i, s in enumerate(states) if s.params.has_penalties]
        if not rows:
            return None
        params = [states[i].params for i in rows]

        def column(name: str, neutral: float) -> Tensor | None:
            values = [getattr(p, name) for p in params]
            if all(v == neutral for v in values):
                return None
            return _tensor(values, torch.float32, device).unsqueeze(1)

        def bins(token_lists: list[list[int]], dtype: torch.dtype) -> Tensor:
            tokens = _padded(token_lists, vocab_size, device)  # pad into a dropped last bin
            out = torch.zeros(len(rows), vocab_size + 1, dtype=dtype, device=device)
            return out.scatter_add_(1, tokens, torch.ones_like(tokens, dtype=dtype))[:, :-1]

        repetition = column("repetition_penalty", 1.0)
        prompts = [states[i].prompt_token_ids for i in rows]
        return cls(
            rows=_tensor(rows, torch.int64, device),
            output_counts=bins([states[i].output_token_ids for i in rows], torch.float32),
            repetition=repetition,
            seen_in_prompt=None if repetition is None else bins(prompts, torch.int32) > 0,
            frequency=column("frequency_penalty", 0.0),
            presence=column("presence_penalty", 0.0),
        )


@dataclass(frozen=True)
class SamplingBatch:
    """Per-step sampling inputs for B requests over a vocabulary of V tokens."""

    vocab_size: int
    all_greedy: bool
    greedy_rows: Tensor | None  # [B] bool, only when the batch mixes greedy and random
    temperature: Tensor | None  # [B, 1]; 1 on greedy rows; None when all greedy
    top_k: Tensor | None  # [B] int64; V on rows without top-k
    max_top_k: int
    top_p: Tensor | None  # [B] float32; 1 on rows without top-p
    min_p: Tensor | None  # [B, 1] float32; 0 on rows without min-p
    seeded: list[tuple[int, int]]  # (row, generator seed of this step's draw)
    any_unseeded: bool  # some random row draws from the engine-wide generator
    disallowed: tuple[Tensor, Tensor] | None  # (rows [A], mask [A, V]): allowed_token_ids
    banned: TokenEntries | None  # set to -inf: bad words and min_tokens stop tokens
    logit_bias: TokenEntries | None
    penalties: Penalties | None
    max_num_logprobs: int | None  # largest `logprobs` asked for, None when none

    @property
    def needs_processing(self) -> bool:
        """Whether any logits processor runs before greedy/random selection."""
        return any(x is not None for x in
                   (self.disallowed, self.banned, self.logit_bias, self.penalties))

    @classmethod
    def from_states(cls, states: Sequence[SamplingState], vocab_size: int,
                    device: torch.device | str) -> SamplingBatch:
        device = torch.device(device)
        params = [s.params for s in states]
        random = [not p.is_greedy for p in params]

        def on_random_rows(name: str, off: float) -> list:
            return [getattr(p, name) if r else off for p, r in zip(params, random, strict=True)]

        top_k = [k if 0 < k < vocab_size else vocab_size
                 for k in on_random_rows("top_k", vocab_size)]
        top_p, min_p = on_random_rows("top_p", 1.0), on_random_rows("min_p", 0.0)
        logprobs = [p.logprobs for p in params if p.logprobs is not None]
        mixed = any(random) and not all(random)
        max_top_k = max((k for k in top_k if k < vocab_size), default=0)
        return cls(
            vocab_size=vocab_size,
            all_greedy=not any(random),
            greedy_rows=_tensor([not r for r in random], torch.bool, device) if mixed else None,
            temperature=_tensor(on_random_rows("temperature", 1.0), torch.float32,
                                device).unsqueeze(1) if any(random) else None,
            top_k=_tensor(top_k, torch.int64, device) if max_top_k else None,
            max_top_k=max_top_k,
            top_p=_tensor(top_p, torch.float32, device) if any(p < 1 for p in top_p) else None,
            min_p=_tensor(min_p, torch.float32, device).unsqueeze(1) if any(min_p) else None,
            seeded=[(i, s.draw_seed) for i, s in enumerate(states)
                    if random[i] and s.draw_seed is not None],
            any_unseeded=any(r and p.seed is None for p, r in zip(params, random, strict=True)),
            disallowed=cls._disallowed(states, vocab_size, device),
            banned=TokenEntries.build(cls._banned(states), device),
            logit_bias=TokenEntries.build(
                [(i, t, b) for i, p in enumerate(params) for t, b in p.logit_bias.items()],
                device),
            penalties=Penalties.build(states, vocab_size, device),
            max_num_logprobs=max(logprobs) if logprobs else None,
        )

    @staticmethod
    def _disallowed(states: Sequence[SamplingState], vocab_size: int,
                    device: torch.device) -> tuple[Tensor, Tensor] | None:
        rows = [i for i, s in enumerate(states) if s.params.allowed_token_ids is not None]
        if not rows:
            return None
        entries = TokenEntries.build([(j, t) for j, i in enumerate(rows)
                                      for t in states[i].params.allowed_token_ids], device)
        mask = torch.ones(len(rows), vocab_size, dtype=torch.bool, device=device)
        mask[entries.rows, entries.cols] = False
        return _tensor(rows, torch.int64, device), mask

    @staticmethod
    def _banned(states: Sequence[SamplingState]) -> list[tuple[int, int]]:
        entries = []
        for i, state in enumerate(states):
            tokens = state.banned_by_bad_words()
            if state.below_min_tokens:
                tokens += state.stop_token_ids_for_min_tokens
            entries += [(i, t) for t in tokens]
        return entries
