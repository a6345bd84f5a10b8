"""A launched step's results (sampled tokens, or pooled outputs), read back to the host
only when the engine asks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from pagoda.engine.scheduler_output import ModelRunnerOutput
from pagoda.outputs import TokenLogprobs
from pagoda.sample import LogprobsTensors, SamplingState
from pagoda.spec import accepted_tokens

if TYPE_CHECKING:
    from pagoda.structured.engine import GrammarBitmask


def copy_to_host(tensor: torch.Tensor, pinned: bool) -> torch.Tensor:
    """Queue a device-to-host copy behind the work that produces `tensor`; with `pinned`,
    it does not wait for that work (read it after the step's event completes)."""
    if not pinned:
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


@dataclass
class SampledRow:
    """One request that samples this step: its state and where its token goes."""

    request_id: str
    state: SamplingState
    output_index: int
    """Index of this step's placeholder in `state.output_token_ids`."""
    drafts: list[int] = field(default_factory=list)
    """Draft tokens verified this step (speculative decoding)."""

    @property
    def num_draws(self) -> int:
        """Rows of the sampler's batch it takes: one, and one per draft."""
        return 1 + len(self.drafts)

    def draw_states(self) -> list[SamplingState]:
        """The state each of its draws samples with: its own, then at each draft's next
        position a copy whose output ends with the drafts so far (so a seeded draw, and
        min_tokens, count the tokens before it, as without speculation)."""
        out = self.state.output_token_ids
        return [self.state] + [replace(self.state, output_token_ids=out + self.drafts[:j])
                               for j in range(1, self.num_draws)]


@dataclass
class PromptLogprobRows:
    request_id: str
    logprobs: LogprobsTensors | None
    """Host tensors (None: the chunk holds no position whose next token is in the prompt)."""


@dataclass
class PendingStepOutput:
    """Sampled ids (and logprobs) on their way to the host while the device may still be
    computing them, and later steps are already being prepared."""

    rows: list[SampledRow]
    sampled: torch.Tensor | None  # [sum of num_draws] on the host, filled when `event` completes
    logprobs: LogprobsTensors | None
    prompt_logprobs: list[PromptLogprobRows] = field(default_factory=list)
    event: torch.Event | None = None
    drafts: torch.Tensor | None = None
    """[sum of drafts] on the host: a draft model's drafts, row after row (the rows'
    `drafts` are the scheduler's placeholders)."""
    _output: ModelRunnerOutput | None = None

    def result(self) -> ModelRunnerOutput:
        if self._output is not None:
            return self._output
        if self.event is not None:
            self.event.synchronize()
        out = ModelRunnerOutput()
        if self.sampled is not None:
            tokens = self.sampled.tolist()
            lp = None
            if self.logprobs is not None:
                lp = self.logprobs.tolists([row.state.params.logprobs or 0 for row in self.rows
                                            for _ in range(row.num_draws)])
            proposed = iter(self.drafts.tolist()) if self.drafts is not None else None
            i = 0  # the row's first draw
            for row in self.rows:
                drawn = tokens[i : i + row.num_draws]
                drafts = row.drafts if proposed is None else [next(proposed) for _ in row.drafts]
                new = accepted_tokens(drawn, drafts)
                row.state.output_token_ids[row.output_index : row.output_index + 1] = new
                out.sampled[row.request_id] = new[0]
                if row.drafts:
                    out.verified[row.request_id] = new
                if lp is not None and row.state.params.logprobs is not None:
                    out.logprobs[row.request_id] = TokenLogprobs(
                        lp.token_ids[i], lp.logprobs[i], lp.ranks[i])
                i += row.num_draws
        for want in self.prompt_logprobs:
            if want.logprobs is None:
                out.prompt_logprobs[want.request_id] = []
                continue
            plp = want.logprobs.tolists()
            out.prompt_logprobs[want.request_id] = [
                TokenLogprobs(ids, lps, rank)
                for ids, lps, rank in zip(plp.token_ids, plp.logprobs, plp.ranks, strict=True)
            ]
        self._output = out
        return out


@dataclass
class PendingPooledOutput:
    """A pooling step's outputs on their way to the host: one flat float32 tensor, each
    finished request's values one after the other."""

    request_ids: list[str]
    lengths: list[int]
    values: torch.Tensor | None  # [sum(lengths)] on the host, filled when `event` completes
    event: torch.Event | None = None

    def result(self) -> ModelRunnerOutput:
        if self.event is not None:
            self.event.synchronize()
        out = ModelRunnerOutput()
        if self.values is None:
            return out
        values = self.values.tolist()
        start = 0
        for request_id, length in zip(self.request_ids, self.lengths, strict=True):
            out.pooled[request_id] = values[start : start + length]
            start += length
        return out


class AwaitingBitmask:
    """A launched step whose forward is issued and whose sampling waits for its token
    bitmask (`provide`), computed once the previous step's tokens have advanced the
    grammars: the bitmask's host work overlaps the forward."""

    awaits_bitmask = True

    def __init__(self, sample: Callable[[GrammarBitmask | None], PendingStepOutput]):
        self._sample = sample
        self._pending: PendingStepOutput | None = None

    def provide(self, bitmask: GrammarBitmask | None) -> PendingStepOutput:
        self._pending = self._sample(bitmask)
        return self._pending

    def result(self) -> ModelRunnerOutput:
        if self._pending is None:
            raise RuntimeError("a step's result was read before its token bitmask came")
        return self._pending.result()
