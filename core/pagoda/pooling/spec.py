"""What a pooling model's output is, decided once when it loads: its task, how hidden
states become the output, and which request options fit it.

Plain data without torch: the worker resolves it and the front end receives it with the
engine core's description (`info["pooler"]`) to check requests against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pagoda.config import PoolerConfig
from pagoda.pooling.sentence_transformers import SentenceTransformersConfig
from pagoda.pooling_params import PoolingParams, PoolingTask

PoolingType = Literal["mean", "cls", "last"]

_ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity"}
"""A cross-encoder's activation (sentence-transformers' `activation_fn`, a torch.nn class
path) by class name, and ours."""


@dataclass(frozen=True)
class PoolerSpec:
    task: PoolingTask
    pooling: PoolingType
    """Which hidden states make the output: the mean over the prompt, its first (cls) or
    its last token."""
    normalize: bool
    """Whether an embedding is scaled to unit length."""
    size: int
    """Values per output: the embedding's length, or 1 (a score)."""
    matryoshka: bool = False
    """Whether an embedding may be cut short (`PoolingParams.dimensions`)."""
    matryoshka_dimensions: tuple[int, ...] | None = None
    """The lengths it may be cut to; None: any from 1 to `size`."""
    activation: Literal["sigmoid", "identity"] | None = None
    """What turns a cross-encoder's logit into its score."""
    token_types: int = 0
    """Segments (token_type_ids) the model tells apart, e.g. 2 for a text pair; 0: it reads
    none."""

    @property
    def needs_all_positions(self) -> bool:
        """Whether every prompt position's hidden state is needed (so each prompt runs in
        one step, without prefix-cache hits), not only the last one's."""
        return self.pooling != "last"

    def check_token_types(self, token_type_ids: list[int]) -> None:
        """ValueError unless the model reads token types and knows each of these."""
        if not self.token_types:
            raise ValueError("token_type_ids are not supported: this model reads none")
        bad = next((t for t in token_type_ids if not 0 <= t < self.token_types), None)
        if bad is not None:
            raise ValueError(f"token type id {bad} is out of range [0, {self.token_types})")

    def check(self, params: PoolingParams) -> None:
        """ValueError naming the field when `params` asks for what this model cannot do."""
        if params.task != self.task:
            does = {"embed": "computes embeddings", "score": "scores text pairs (a "
                    "cross-encoder)"}[self.task]
            raise ValueError(f"task {params.task!r} is not supported: this model {does}")
        dims = params.dimensions
        if dims is None:
            return
        if not self.matryoshka:
            raise ValueError("dimensions is not supported by this model: its embeddings "
                             "cannot be shortened (it is not a Matryoshka model)")
        allowed = self.matryoshka_dimensions
        if dims > self.size or (allowed is not None and dims not in allowed):
            choices = (", ".join(map(str, allowed)) if allowed is not None
                       else f"1 to {self.size}")
            raise ValueError(f"dimensions must be one of {choices} for this model, got {dims}")


def resolve_pooler_spec(task: PoolingTask, model_pooling: PoolingType, model_normalize: bool,
                        config: PoolerConfig, checkpoint: SentenceTransformersConfig | None,
                        hf_config: Any) -> PoolerSpec:
    """The spec from, by precedence: the user's options (`config`), the checkpoint's
    sentence-transformers modules, the model class's own defaults. ValueError for an option
    that does not apply to the model."""
    if task == "score":
        return _cross_encoder_spec(config, hf_config)
    pooling = config.pooling or (checkpoint and checkpoint.pooling) or model_pooling
    normalize = config.normalize_embeddings
    if normalize is None:
        normalize = checkpoint.normalize if checkpoint is not None else model_normalize
    dims = getattr(hf_config, "matryoshka_dimensions", None)
    return PoolerSpec(
        "embed", pooling, normalize, hf_config.hidden_size,
        matryoshka=bool(getattr(hf_config, "is_matryoshka", False)) or bool(dims),
        matryoshka_dimensions=tuple(sorted(dims)) if dims else None)


def _cross_encoder_spec(config: PoolerConfig, hf_config: Any) -> PoolerSpec:
    for name in ("pooling", "normalize_embeddings"):
        if getattr(config, name) is not None:
            raise ValueError(f"{name} does not apply to a cross-encoder: it scores a text pair "
                             "with its classifier on the first token")
    num_labels = getattr(hf_config, "num_labels", 1)
    if num_labels != 1:
        raise ValueError(f"num_labels is {num_labels}: only cross-encoders with one label (a "
                         "relevance score) are supported")
    return PoolerSpec("score", "cls", False, 1, activation=_activation(hf_config))


def _activation(hf_config: Any) -> Literal["sigmoid", "identity"]:
    """sentence-transformers' CrossEncoder rule: the config's activation_fn, else a sigmoid
    for one label."""
    saved = (getattr(hf_config, "sentence_transformers", None) or {}).get("activation_fn") or (
        getattr(hf_config, "sbert_ce_default_activation_function", None))
    if saved is None:
        return "sigmoid"
    name = str(saved).rpartition(".")[2]
    if name not in _ACTIVATIONS:
        raise ValueError(f"sentence_transformers.activation_fn {saved!r} is not supported "
                         f"(supported: {', '.join(_ACTIVATIONS)})")
    return _ACTIVATIONS[name]  # type: ignore[return-value]
