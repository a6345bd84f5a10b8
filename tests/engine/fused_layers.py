"""Helpers of the fused decode layer tests (`pagoda.models.decode_fusion`): the model's
decoder layers, greedy tokens with their logprobs, and a wrapper counting fused steps."""

from __future__ import annotations

from typing import Any

from pagoda import LLM, SamplingParams
from pagoda.models.decoder import DecoderLayer


def decoder_layers(llm: LLM) -> list[DecoderLayer]:
    """The decoder layers of an in-process engine's model."""
    model = llm.engine.core.executor.worker.model
    return [m for m in model.modules() if isinstance(m, DecoderLayer)]


def greedy_logprobs(llm: LLM, prompts: list[list[int]], max_tokens: int
                    ) -> list[tuple[list[int], list[float]]]:
    """Each prompt's greedy tokens and their logprobs."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            logprobs=0, detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [(list(o.outputs[0].token_ids), [s.logprobs[0] for s in o.outputs[0].logprobs])
            for o in outs]


class CountingFusedLayer:
    """A fused decode layer that appends to `calls` at each step it takes."""

    def __init__(self, inner: Any, calls: list[int]):
        self.inner, self.calls, self.max_rows = inner, calls, inner.max_rows

    def pre_attention(self, *args: Any) -> Any:
        self.calls.append(1)
        return self.inner.pre_attention(*args)

    def post_attention(self, *args: Any) -> Any:
        return self.inner.post_attention(*args)
