"""Pooling models: the `PoolingModel` base, the spec each is built with, and the step's
hidden states turned into outputs (which rows make each prompt's output, then each
request's own finish: a Matryoshka cut, normalizing)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from pagoda.config import PoolerConfig
from pagoda.pooling import PoolerSpec, PoolingType, SentenceTransformersConfig
from pagoda.pooling.spec import resolve_pooler_spec
from pagoda.pooling_params import PoolingParams, PoolingTask


class PoolingModel:
    """The base of a pooling model class (beside nn.Module): class attributes say what it
    outputs, `pooler_spec` (given at construction) how. Its `forward` returns the final hidden
    states [T, hidden] like a causal LM's; `pool` turns the rows of each finished prompt
    into its output."""

    pooling_task: PoolingTask = "embed"
    default_pooling: PoolingType = "last"
    """An embedding model's pooling where neither the user nor the checkpoint says."""
    default_normalize = True
    bidirectional = False
    """Whether its attention sees the whole prompt (an encoder): each prompt then runs in
    one step, and nothing is cached."""
    uses_token_type_ids = False
    """Whether `forward` takes `token_type_ids` (a text pair's segments)."""
    pooler_spec: PoolerSpec

    def pool(self, hidden: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
        """float32 [len(spans), pooler_spec.size]: each prompt's output from its rows start:end
        of `hidden` (an embedding model pools them as its spec says)."""
        return pool_hidden_states(hidden, spans, self.pooler_spec.pooling)


def model_runner(model_cls: type) -> str:
    """"pooling" for a `PoolingModel` class, else "generate"."""
    return "pooling" if issubclass(model_cls, PoolingModel) else "generate"


def pooler_spec_for(model_cls: type, config: PoolerConfig,
                    checkpoint: SentenceTransformersConfig | None,
                    hf_config: Any) -> PoolerSpec | None:
    """The PoolerSpec a pooling class is built with; None for a generating class, which
    takes no pooler option (ValueError naming one that is set)."""
    if not issubclass(model_cls, PoolingModel):
        for name in ("pooling", "normalize_embeddings"):
            if getattr(config, name) is not None:
                raise ValueError(f"{name} applies to pooling models only; "
                                 f"{model_cls.__name__} generates (see runner)")
        return None
    spec = resolve_pooler_spec(model_cls.pooling_task, model_cls.default_pooling,
                               model_cls.default_normalize, config, checkpoint, hf_config)
    if not model_cls.uses_token_type_ids:
        return spec
    return replace(spec, token_types=getattr(hf_config, "type_vocab_size", 1))


def whole_prompt_reason(model: PoolingModel) -> str | None:
    """Why each prompt of this pooling model must run in one step (no chunked prefill, no
    prefix-cache hits), or None when only its last token's hidden state matters."""
    spec = model.pooler_spec
    if model.bidirectional:
        return f"{type(model).__name__} attends bidirectionally over the whole prompt"
    if spec.needs_all_positions:
        return f"{spec.pooling} pooling reads every prompt position"
    return None


def pool_hidden_states(hidden: torch.Tensor, spans: list[tuple[int, int]],
                       pooling: PoolingType) -> torch.Tensor:
    """float32 [len(spans), hidden] from hidden [T, hidden]: per span (its prompt's rows
    start:end of this step), the mean of its rows, its first row (cls) or its last."""
    if pooling != "mean":
        return select_rows(hidden, [start if pooling == "cls" else end - 1
                                    for start, end in spans]).float()
    lengths = torch.tensor([end - start for start, end in spans], dtype=torch.int64)
    rows = torch.cat([torch.arange(start, end) for start, end in spans])
    segment = torch.repeat_interleave(torch.arange(len(spans)), lengths)
    rows, segment, lengths = (t.to(hidden.device, non_blocking=True)
                              for t in (rows, segment, lengths))
    sums = torch.zeros(len(spans), hidden.shape[1], dtype=torch.float32, device=hidden.device)
    sums.index_add_(0, segment, hidden.index_select(0, rows).float())
    return sums / lengths.unsqueeze(1)


def select_rows(hidden: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """hidden[rows], gathered on hidden's device."""
    index = torch.tensor(rows, dtype=torch.int64).to(hidden.device, non_blocking=True)
    return hidden.index_select(0, index)


def finish_outputs(pooled: torch.Tensor, params: list[PoolingParams],
                   spec: PoolerSpec) -> list[torch.Tensor]:
    """Each request's output from its row of `pooled`: cut to its `dimensions`, then scaled
    to unit length where the model normalizes."""
    if all(p.dimensions is None for p in params):
        return list(F.normalize(pooled, dim=-1) if spec.normalize else pooled)
    cut = [row[: p.dimensions] for row, p in zip(pooled, params, strict=True)]
    return [F.normalize(row, dim=-1) for row in cut] if spec.normalize else cut
