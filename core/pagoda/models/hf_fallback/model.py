"""The transformers fallback: an HF causal LM's own modeling code, with Pagoda's paged
attention answering its attention calls.

The HF model runs over the step's flattened batch as one sequence of shape [1, T] with
Pagoda's positions and no HF cache; each attention call writes its keys and values into
that layer's paged KV cache and attends per sequence as the step's metadata says. Logits
come from the hidden states of the rows the runner samples. At construction, short probe
forwards check that the model's attention calls are all there is to serve (see `probe`);
what is not fails then, naming the reason.

One device, unquantized weights (a GGUF's dequantized): tensor and pipeline parallelism
and quantized checkpoints are refused at load.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.attention import AttentionBackend, AttentionMetadata, KVCacheSpec
from pagoda.distributed import pp_group, tp_group
from pagoda.models.decoder_spec import attention_shape
from pagoda.models.hf_fallback import attention as hf_attention
from pagoda.models.hf_fallback.probe import (
    AttentionCall,
    causal_attention,
    check_calls,
    check_layer_kinds,
    mixes_outside_attention,
    packing_changes_hidden,
    probe_attention,
    probe_ids,
)
from pagoda.models.hf_fallback.support import fallback_class
from pagoda.models.layers import Attention
from pagoda.quant import QuantMethod
from pagoda.quant.checkpoint import CheckpointTensor, dense

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


class TransformersForCausalLM(nn.Module):
    """Any causal LM transformers builds with attention-interface support, as a Pagoda
    model (the same interface as the native classes)."""

    def __init__(
        self,
        config: PretrainedConfig,
        *,
        dtype: torch.dtype,
        attn_backend: type[AttentionBackend],
        quant_method: QuantMethod | None = None,
    ):
        super().__init__()
        self.architecture, hf_class = fallback_class(config)
        _refuse_parallelism_and_quantization(self.architecture, quant_method)
        hf_attention.register()
        self.config, self.dtype = config, dtype
        hf_config = copy.deepcopy(config)  # transformers writes its choices into it
        self.hf_model: PreTrainedModel = hf_class._from_config(
            hf_config, dtype=dtype, attn_implementation=hf_attention.ATTN_IMPLEMENTATION
        ).eval()
        calls = self._probe()
        self._check_backend(attn_backend, calls)
        self.attn_layers = nn.ModuleList(
            Attention(call.num_heads, call.head_size, call.num_kv_heads,
                      attn_backend=attn_backend, scale=call.scale,
                      sliding_window=call.sliding_window, logits_soft_cap=call.soft_cap)
            for call in calls
        )
        self._step = hf_attention.StepContext()
        for index, (call, layer) in enumerate(zip(calls, self.attn_layers, strict=True)):
            hf_attention.bind(call.module, hf_attention.LayerBinding(layer, index, self._step))

    @property
    def _base(self) -> nn.Module:
        """The HF model without its LM head (its final hidden states are ours)."""
        return self.hf_model.base_model

    @torch.no_grad()
    def _probe(self) -> list[AttentionCall]:
        """The model's attention calls in layer order; ValueError for what the fallback
        cannot serve (see `probe`)."""
        device = next(self.hf_model.parameters()).device
        vocab_size = self.config.get_text_config().vocab_size
        reasons = check_layer_kinds(self.config)
        try:
            calls, hidden = probe_attention(self._base, vocab_size, device)
            reasons += check_calls(calls, self.config)
            if not reasons and (problem := self._behaviour_problem(hidden, vocab_size, device)):
                reasons.append(problem)
        except Exception as exc:  # noqa: BLE001 (any failure of foreign code: say where)
            raise ValueError(f"The transformers fallback failed to run {self.architecture} "
                             f"on a probe forward: {type(exc).__name__}: {exc}") from exc
        if reasons:
            raise ValueError(f"The transformers fallback cannot run {self.architecture}: "
                             + "; ".join(reasons))
        return sorted(calls, key=lambda call: call.layer_idx)

    def _behaviour_problem(self, hidden: torch.Tensor, vocab_size: int,
                           device: torch.device) -> str | None:
        """What in the model's behaviour (beyond its attention calls) the fallback would
        get wrong, if anything; `hidden`: the probe sequence's final hidden states."""
        if mixes_outside_attention(self._base, vocab_size, device, self.dtype):
            return ("its tokens mix outside attention (convolution, recurrence or linear "
                    "attention layers)")
        if packing_changes_hidden(self._base, hidden, vocab_size, device, self.dtype):
            return ("a sequence packed after another gets other hidden states than alone "
                    "(are its positions not taken from position_ids?)")
        if not self._head_matches(hidden, vocab_size, device):
            return ("its LM head computes more than the output embedding and the logit "
                    "scaling and soft-capping the fallback applies")
        return None

    def _head_matches(self, hidden: torch.Tensor, vocab_size: int,
                      device: torch.device) -> bool:
        """Whether `compute_logits` on the base model's hidden states gives transformers'
        own logits."""
        ids = probe_ids(vocab_size, device)
        with hf_attention.calls_answered_by(
                lambda module, q, k, v, **kwargs: causal_attention(q, k, v, kwargs.get("scaling"))):
            theirs = self.hf_model(input_ids=ids, position_ids=torch.arange(
                ids.shape[1], device=device)[None], use_cache=False).logits[0].float()
        tolerance = 1e-4 if self.dtype == torch.float32 else 1e-2
        return bool((self.compute_logits(hidden) - theirs).norm() <= tolerance * theirs.norm())

    def _check_backend(self, attn_backend: type[AttentionBackend],
                       calls: list[AttentionCall]) -> None:
        """Refuse a backend (chosen from the config, before the model was built) that cannot
        serve what the model's attention calls turned out to need."""
        head_sizes = attn_backend.supported_head_sizes
        lacking = [what for what, wrong in (
            (f"head size {calls[0].head_size}",
             head_sizes is not None and calls[0].head_size not in head_sizes),
            ("soft-capping of attention logits",
             any(c.soft_cap for c in calls) and not attn_backend.supports_logits_soft_cap),
            ("sliding windows",
             any(c.sliding_window for c in calls) and not attn_backend.supports_sliding_window),
        ) if wrong]
        if lacking:
            raise ValueError(f"{self.architecture}'s attention needs {' and '.join(lacking)}; "
                             f"attention backend {attn_backend.name!r} was not chosen for "
                             "that: choose one that supports it (attention_backend)")

    @staticmethod
    def attention_shape(config: PretrainedConfig) -> tuple[int, int, int, int | None]:
        """(num_heads, num_kv_heads, head_size, sliding_window) as the config states them,
        for choosing a backend; the built model's own calls decide its layers."""
        return attention_shape(config.get_text_config())

    @property
    def num_attention_layers(self) -> int:
        """Attention layers (each needs a KV cache)."""
        return len(self.attn_layers)

    def kv_cache_spec(self, block_size: int, kv_cache_dtype: torch.dtype) -> KVCacheSpec:
        """The paged KV cache layout each attention layer needs (the same in every layer)."""
        layer = self.attn_layers[0]
        return KVCacheSpec(block_size, layer.num_kv_heads, layer.head_size, kv_cache_dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[torch.Tensor],
        attn_metadata: AttentionMetadata,
    ) -> torch.Tensor:
        """input_ids, positions [T] -> final hidden states [T, hidden]."""
        self._step.kv_caches, self._step.metadata = kv_caches, attn_metadata
        out = self._base(input_ids=input_ids[None], position_ids=positions[None],
                         use_cache=False)
        return out[0][0]

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden states [N, hidden] -> float32 logits [N, vocab]: the output embedding,
        then the scaling or soft-capping the config asks for."""
        logits = self.hf_model.get_output_embeddings()(hidden_states)
        text = self.config.get_text_config()
        if (scale := getattr(text, "logit_scale", None)) is not None:  # Cohere
            logits = logits * scale
        if (divisor := getattr(text, "logits_scaling", None)) is not None:  # Granite
            logits = logits / divisor
        if (cap := getattr(text, "final_logit_softcapping", None)) is not None:  # Gemma 2+
            logits = torch.tanh(logits / cap) * cap
        return logits.float()

    def load_weights(self, weights: Iterable[tuple[str, CheckpointTensor]]) -> set[str]:
        """Load HF-named checkpoint weights through transformers' own loading (its renames
        and conversions for this architecture); returns the parameter names loaded."""
        state_dict = {name: dense(tensor) for name, tensor in weights}
        with _no_progress_bar():  # a bar per load: noise in an engine's log
            loaded, info = type(self.hf_model).from_pretrained(
                None, config=self.config, state_dict=state_dict, dtype=self.dtype,
                output_loading_info=True,
            )
        problems = {kind: sorted(info[key]) for kind, key in (
            ("missing", "missing_keys"), ("unexpected", "unexpected_keys"),
            ("of the wrong shape", "mismatched_keys")) if info.get(key)}
        if problems:
            raise ValueError(f"Checkpoint weights for {self.architecture} do not fit "
                             "transformers' model: " + "; ".join(
                                 f"{kind}: {', '.join(map(str, names[:10]))}"
                                 + (f" and {len(names) - 10} more" if len(names) > 10 else "")
                                 for kind, names in problems.items()))
        self.hf_model.load_state_dict(loaded.state_dict())
        return {f"hf_model.{name}" for name, _ in self.hf_model.named_parameters()}


@contextmanager
def _no_progress_bar() -> Iterator[None]:
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def _refuse_parallelism_and_quantization(architecture: str,
                                         quant_method: QuantMethod | None) -> None:
    what = f"The transformers fallback (running {architecture})"
    if tp_group().world_size > 1 or pp_group().world_size > 1:
        raise ValueError(f"{what} runs on one device: tensor_parallel_size "
                         f"{tp_group().world_size} and pipeline_parallel_size "
                         f"{pp_group().world_size} must both be 1")
    if quant_method is not None and quant_method.name != "none":
        raise ValueError(f"{what} runs unquantized weights only, not quantization "
                         f"{quant_method.name!r}: use a dense checkpoint (a GGUF file loads "
                         "dequantized with quantization 'none')")
