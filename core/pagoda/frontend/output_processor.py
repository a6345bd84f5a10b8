"""Front-end output handling: detokenize, apply stop strings, build RequestOutputs (and a
pooling model's PoolingRequestOutputs).

This runs on AsyncLLM's reader thread for every token of every request, so the per-token
path stays lean: one clock read per step, stop-string bookkeeping computed once per
request, and no work that grows with the output beyond the cumulative copies the
RequestOutput contract needs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pagoda.engine.request import Request
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.frontend.detokenizer import IncrementalDetokenizer
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.outputs import CompletionOutput, PoolingRequestOutput, RequestOutput, TokenLogprobs
from pagoda.sampling_params import SamplingParams


@dataclass
class _Completion:
    """The front end's view of one child request."""

    index: int
    params: SamplingParams
    detokenizer: IncrementalDetokenizer | None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    wants_logprobs: bool = field(init=False)
    stop_hold: int = field(init=False)
    """Characters a stream holds back: they could still grow into a stop string."""

    def __post_init__(self) -> None:
        self.wants_logprobs = self.params.logprobs is not None
        self.stop_hold = max((len(stop) for stop in self.params.stop), default=1) - 1

    def output(self) -> CompletionOutput:
        wants_logprobs = self.wants_logprobs
        return CompletionOutput(
            self.index, self.visible_text(), list(self.token_ids),
            self.cumulative_logprob if wants_logprobs else None,
            list(self.logprobs) if wants_logprobs else None,
            self.finish_reason, self.stop_reason,
        )

    def visible_text(self) -> str:
        """The text so far, less a tail that could still grow into a stop string (so a
        stream never shows text that a stop string later removes)."""
        if not self.stop_hold or self.finish_reason is not None:
            return self.text
        return self.text[: max(0, len(self.text) - self.stop_hold)]


@dataclass
class _Parent:
    request_id: str
    prompt: ProcessedPrompt
    children: dict[str, _Completion]
    """By child request id, in index order."""
    prompt_logprobs: list[TokenLogprobs | None] | None
    arrival_time: float
    final_only: bool = False
    """Report the request only when it finishes (offline generation), not every step."""
    num_cached_tokens: int = 0
    first_token_time: float | None = None
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.children.values())

    def output(self, finished: bool, now: float) -> RequestOutput:
        metrics = {"arrival_time": self.arrival_time, "last_token_time": now}
        if self.first_token_time is not None:
            metrics["first_token_time"] = self.first_token_time
        if self.num_draft_tokens:
            metrics["spec_draft_tokens"] = self.num_draft_tokens
            metrics["spec_accepted_tokens"] = self.num_accepted_tokens
        return RequestOutput(
            self.request_id, self.prompt.prompt, self.prompt.prompt_token_ids,
            [c.output() for c in self.children.values()],
            finished, self.prompt_logprobs, self.num_cached_tokens, metrics,
        )


class OutputProcessor:
    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._parents: dict[str, _Parent] = {}
        self._children: dict[str, tuple[_Parent, _Completion]] = {}
        self._pooling: dict[str, ProcessedPrompt] = {}
        """Pooling requests in flight (one core request each, under the same id)."""

    def add_pooling(self, request_id: str, prompt: ProcessedPrompt) -> None:
        self._pooling[request_id] = prompt

    def add(self, request_id: str, prompt: ProcessedPrompt, requests: list[Request],
            final_only: bool = False) -> None:
        params = requests[0].sampling_params
        children = {}
        for index, request in enumerate(requests):
            p = request.sampling_params
            detok = None
            if p.detokenize:
                detok = IncrementalDetokenizer(self.tokenizer, prompt.prompt_token_ids,
                                               p.skip_special_tokens,
                                               p.spaces_between_special_tokens)
            children[request.request_id] = _Completion(index, p, detok)
        parent = _Parent(
            request_id, prompt, children,
            [None] if params.prompt_logprobs is not None else None,
            requests[0].arrival_time, final_only,
        )
        self._parents[request_id] = parent
        for child_id, child in children.items():
            self._children[child_id] = (parent, child)

    def has_request(self, request_id: str) -> bool:
        return request_id in self._parents or request_id in self._pooling

    def child_ids(self, request_id: str) -> list[str]:
        if request_id in self._pooling:
            return [request_id]
        parent = self._parents.get(request_id)
        return list(parent.children) if parent else []

    def abort(self, request_id: str) -> RequestOutput | PoolingRequestOutput | None:
        """Mark a request aborted and forget it; returns its final output."""
        pooling = self._pooling.pop(request_id, None)
        if pooling is not None:
            return _pooling_output(request_id, pooling, None, "abort")
        parent = self._parents.pop(request_id, None)
        if parent is None:
            return None
        for child_id, child in parent.children.items():
            self._children.pop(child_id, None)
            if child.finish_reason is None:
                child.finish_reason = "abort"
        return parent.output(True, time.monotonic())

    def process(self, outputs: list[EngineCoreOutput]
                ) -> tuple[list[RequestOutput | PoolingRequestOutput], list[str]]:
        """Apply one step's outputs. Returns the updated requests (a pooling request's
        output once, finished) and the child ids the core must stop (they hit a stop
        string)."""
        now = time.monotonic()
        updated: dict[str, _Parent] = {}
        to_abort: list[str] = []
        children = self._children
        results: list[RequestOutput | PoolingRequestOutput] = []
        for out in outputs:
            if out.pooled is not None:
                prompt = self._pooling.pop(out.request_id, None)
                if prompt is not None:  # else aborted meanwhile
                    results.append(_pooling_output(out.request_id, prompt, out.pooled, "stop",
                                                   out.num_cached_tokens))
                continue
            entry = children.get(out.request_id)
            if entry is None:
                continue
            parent, child = entry
            if child.finish_reason is not None:
                continue  # stopped by a stop string; the core sent this before it heard
            if out.new_prompt_logprobs and parent.prompt_logprobs is not None and child.index == 0:
                parent.prompt_logprobs.extend(out.new_prompt_logprobs)
            if out.new_token_ids:
                if parent.first_token_time is None:
                    parent.first_token_time = now
                if out.num_cached_tokens > parent.num_cached_tokens:
                    parent.num_cached_tokens = out.num_cached_tokens
                parent.num_draft_tokens += out.num_draft_tokens
                parent.num_accepted_tokens += out.num_accepted_tokens
                if self._add_tokens(child, out):
                    to_abort.append(out.request_id)
            updated[parent.request_id] = parent
        for parent_id, parent in updated.items():
            finished = parent.finished
            if finished:
                del self._parents[parent_id]
                for child_id in parent.children:
                    self._children.pop(child_id, None)
                results.append(parent.output(True, now))
            elif not parent.final_only:
                results.append(parent.output(False, now))
        return results, to_abort

    def _add_tokens(self, child: _Completion, out: EngineCoreOutput) -> bool:
        """Append tokens and text; True when a stop string ended the completion."""
        new_ids = out.new_token_ids
        child.token_ids.extend(new_ids)
        for lp in out.new_logprobs:
            child.logprobs.append(lp)
            child.cumulative_logprob += lp.logprobs[0]
        child.finish_reason, child.stop_reason = out.finish_reason, out.stop_reason
        detokenizer = child.detokenizer
        if detokenizer is None:
            return False
        params = child.params
        if out.finish_reason == "stop" and not params.include_stop_str_in_output:
            new_ids = new_ids[:-1]  # the eos / stop token's own text is not part of the output
        check_stops = child.finish_reason is None and bool(params.stop)
        for i, token in enumerate(new_ids):  # several with speculative decoding
            start = len(child.text)
            child.text += detokenizer.add_token(token)
            if check_stops and self._apply_stop_strings(child, start):
                del child.token_ids[len(child.token_ids) - len(new_ids) + i + 1 :]
                return True  # the tokens after the stop string's are not output
        return False

    @staticmethod
    def _apply_stop_strings(child: _Completion, start: int) -> bool:
        params = child.params
        best: tuple[int, str] | None = None
        for stop in params.stop:
            index = child.text.find(stop, max(0, start - len(stop) + 1))
            if index != -1 and (best is None or index < best[0]):
                best = (index, stop)
        if best is None:
            return False
        index, stop = best
        child.text = child.text[: index + len(stop) if params.include_stop_str_in_output else index]
        child.finish_reason, child.stop_reason = "stop", stop
        return True


def _pooling_output(request_id: str, prompt: ProcessedPrompt, data: list[float] | None,
                    finish_reason: str, num_cached_tokens: int = 0) -> PoolingRequestOutput:
    return PoolingRequestOutput(request_id, prompt.prompt, prompt.prompt_token_ids, data,
                                finish_reason, num_cached_tokens)
