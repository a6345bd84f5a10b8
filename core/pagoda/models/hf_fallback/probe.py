"""What an HF model's attention looks like, seen on short forwards at load, and whether the
fallback can serve it.

The fallback answers every call the model makes to its attention interface with paged
attention over one flattened batch of sequences. That is right only if the calls are the
whole story: every layer attends once, causally, over its own tokens, with the same KV
shape in every layer, with no argument or mask we would drop (attention sinks, position
biases, chunked or bidirectional masks), no token mixing outside attention (convolutions,
recurrences, linear attention) and positions taken from `position_ids`.
`probe_attention` records the calls of a forward over a few tokens; `check_layer_kinds`,
`check_calls`, `mixes_outside_attention` and `packing_changes_hidden` say what of that
the fallback cannot serve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pagoda.models.hf_fallback.attention import calls_answered_by

PROBE_TOKENS = 4
"""Tokens of the probe sequence."""

ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")
"""HF `layer_types` values the fallback serves."""

_UNDERSTOOD = ("scaling", "sliding_window", "softcap", "is_causal")
"""Attention arguments the fallback passes on to its backend."""

_HARMLESS = ("dropout", "position_ids", "cache_position", "use_cache")
"""Arguments that do not change what attention computes at inference (dropout is checked
to be 0)."""


@dataclass(frozen=True)
class AttentionCall:
    """One call of the model's attention interface."""

    module: nn.Module
    layer_idx: int | None
    num_heads: int
    num_kv_heads: int
    head_size: int
    value_head_size: int
    query_len: int
    key_len: int
    scale: float | None
    sliding_window: int | None
    soft_cap: float | None
    is_causal: bool
    causal_mask: bool
    """No mask, or one that says no more than causality."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Arguments beyond those the fallback understands or may ignore."""


def _record(calls: list[AttentionCall]) -> Callable[..., torch.Tensor]:
    def answer(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, attention_mask: Any = None, **kwargs: Any) -> torch.Tensor:
        causal = kwargs.get("is_causal")
        calls.append(AttentionCall(
            module=module,
            layer_idx=getattr(module, "layer_idx", None),
            num_heads=query.shape[1], num_kv_heads=key.shape[1],
            head_size=query.shape[3], value_head_size=value.shape[3],
            query_len=query.shape[2], key_len=key.shape[2],
            scale=kwargs.get("scaling"),
            sliding_window=kwargs["sliding_window"] if "sliding_window" in kwargs
            else getattr(module, "sliding_window", None),
            soft_cap=kwargs.get("softcap"),
            is_causal=bool(getattr(module, "is_causal", True) if causal is None else causal),
            causal_mask=_is_causal_mask(attention_mask, query.shape[2], key.shape[2]),
            extra={name: value for name, value in kwargs.items()
                   if name not in _UNDERSTOOD and not _harmless(name, value)},
        ))
        return causal_attention(query, key, value, kwargs.get("scaling"))
    return answer


def _harmless(name: str, value: Any) -> bool:
    if name == "dropout":
        return not value
    return name in _HARMLESS or value is None or value is False


def _is_causal_mask(mask: Any, query_len: int, key_len: int) -> bool:
    """Whether `mask` (None, or a boolean or additive tensor broadcasting to
    [batch, heads, queries, keys]) lets each token see exactly itself and those before."""
    if mask is None:
        return True
    if not isinstance(mask, torch.Tensor) or mask.shape[-2:] != (query_len, key_len):
        return False
    allowed = mask if mask.dtype == torch.bool else mask == 0
    causal = torch.ones(query_len, key_len, dtype=torch.bool, device=mask.device).tril()
    return bool((allowed == causal).all())


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     scale: float | None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Plain attention of [1, H, T, D] inputs -> [1, T, H, Dv]: causal, or as `mask`
    ([T, T], True where a query sees a key) says."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, is_causal=mask is None, scale=scale)
    return out.transpose(1, 2)


def self_only_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                        value: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """Each token sees only itself: its own value, for every query head of its group."""
    group = query.shape[1] // value.shape[1]
    return value.repeat_interleave(group, 1).transpose(1, 2)


def probe_ids(vocab_size: int, device: torch.device, offset: int = 0) -> torch.Tensor:
    """[1, PROBE_TOKENS] token ids inside the vocabulary; `offset` changes all but the last."""
    ids = [(3 + 7 * (i + offset)) % vocab_size for i in range(PROBE_TOKENS - 1)]
    return torch.tensor([ids + [5 % vocab_size]], device=device)


def run_base(base: nn.Module, ids: torch.Tensor,
             positions: torch.Tensor | None = None) -> torch.Tensor:
    """The base model's final hidden states [T, hidden] for ids [1, T] (positions [1, T]:
    0, 1, ... unless given)."""
    if positions is None:
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
    return base(input_ids=ids, position_ids=positions, use_cache=False)[0][0]


def probe_attention(base: nn.Module, vocab_size: int,
                    device: torch.device) -> tuple[list[AttentionCall], torch.Tensor]:
    """The attention calls of one forward over the probe sequence, and its final hidden
    states."""
    calls: list[AttentionCall] = []
    with calls_answered_by(_record(calls)):
        hidden = run_base(base, probe_ids(vocab_size, device))
    return calls, hidden


def check_layer_kinds(config: Any) -> list[str]:
    """What in the config's kinds of layers the fallback cannot serve."""
    text = config.get_text_config()
    reasons = [f"its layer_types include {kind!r} (the fallback serves "
               f"{' and '.join(ATTENTION_LAYER_TYPES)})"
               for kind in sorted(set(getattr(text, "layer_types", None) or ()))
               if kind not in ATTENTION_LAYER_TYPES]
    if getattr(text, "attention_chunk_size", None):
        reasons.append("it uses chunked attention (attention_chunk_size)")
    return reasons


def check_calls(calls: list[AttentionCall], config: Any) -> list[str]:
    """What in these calls the fallback cannot serve."""
    if not calls:
        return ["no layer calls the attention interface"]
    text = config.get_text_config()
    num_layers = getattr(text, "num_hidden_layers", None)
    indices = [c.layer_idx for c in calls]
    reasons = []
    if num_layers is not None and len(calls) != num_layers:
        reasons.append(f"a forward calls attention {len(calls)} times for its {num_layers} "
                       "layers (layers that attend twice, or mix tokens some other way)")
    if None in indices:
        reasons.append(f"{type(calls[0].module).__name__} has no layer_idx")
    elif len(set(indices)) != len(indices):
        reasons.append("a layer calls attention more than once per forward")
    elif windows := _windows_against_layer_types(calls, getattr(text, "layer_types", None)):
        reasons.append(f"the sliding windows its attention calls pass disagree with its "
                       f"layer_types (layers {windows})")
    for wrong, reason in (
        (not all(c.is_causal for c in calls), "its attention is not causal (bidirectional)"),
        (not all(c.causal_mask for c in calls), "its attention mask is not plain causal"),
        (any(c.key_len != c.query_len for c in calls),
         "it attends to keys other than its own tokens (cross-attention)"),
        (any(c.value_head_size != c.head_size for c in calls),
         "its value heads differ in size from its query/key heads"),
        (any(c.num_heads % c.num_kv_heads for c in calls),
         "its query heads are not a multiple of its key/value heads"),
        (len({(c.num_kv_heads, c.head_size) for c in calls}) > 1,
         "its layers differ in key/value heads or head size"),
    ):
        if wrong:
            reasons.append(reason)
    reasons += [f"its attention takes {name!r}, which the fallback does not support"
                for name in sorted({name for c in calls for name in c.extra})]
    return reasons


def _windows_against_layer_types(calls: list[AttentionCall],
                                 layer_types: list[str] | None) -> list[int]:
    """Layers whose calls have a sliding window where layer_types says none, or the
    reverse."""
    if not layer_types:
        return []
    return [c.layer_idx for c in calls
            if c.layer_idx is not None and c.layer_idx < len(layer_types)
            and (layer_types[c.layer_idx] == "sliding_attention") != bool(c.sliding_window)]


def _differ(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether a and b differ by more than rounding (relative to a's norm)."""
    tolerance = 1e-3 if dtype == torch.float32 else 2e-2
    return bool((a.float() - b.float()).norm() > tolerance * a.float().norm())


def mixes_outside_attention(base: nn.Module, vocab_size: int, device: torch.device,
                            dtype: torch.dtype) -> bool:
    """Whether tokens influence each other other than through attention calls.

    With attention that lets each token see only itself, a token's final hidden state must
    not depend on the tokens before it; a convolution, recurrence or linear-attention
    layer makes it. Same shapes both times, so only the earlier tokens differ.
    """
    with calls_answered_by(self_only_attention):
        a = run_base(base, probe_ids(vocab_size, device))[-1]
        b = run_base(base, probe_ids(vocab_size, device, offset=1))[-1]
    return _differ(a, b, dtype)


def packing_changes_hidden(base: nn.Module, alone: torch.Tensor, vocab_size: int,
                           device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the probe sequence packed after another, each with its own positions and
    attention, gets other final hidden states than `alone` (its own, unpacked) - as the
    engine's flattened batches need it not to. It does where positions do not come from
    `position_ids`, or tokens mix outside attention."""
    first = probe_ids(vocab_size, device, offset=2)[:, :2]
    ids = torch.cat([first, probe_ids(vocab_size, device)], dim=1)
    lengths = (first.shape[1], PROBE_TOKENS)
    positions = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
    segment = torch.repeat_interleave(torch.arange(2, device=device),
                                      torch.tensor(lengths, device=device))
    mask = (segment[:, None] == segment[None, :]).tril()
    with calls_answered_by(lambda module, q, k, v, **kwargs: causal_attention(
            q, k, v, kwargs.get("scaling"), mask)):
        packed = run_base(base, ids, positions)[lengths[0]:]
    return _differ(alone, packed, dtype)
