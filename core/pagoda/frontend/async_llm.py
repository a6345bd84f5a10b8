"""`AsyncLLM`: the asyncio front end the server uses, over an engine core in its own process.

The front end tokenizes and validates on the caller's event loop, and detokenizes and
applies stop strings on the client's reader thread as each step's outputs arrive; each
request's outputs reach its consumer through a queue on the consumer's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.messages import AddRequests, FinishRequests, StepOutputs
from pagoda.engine.request import RequestStatus
from pagoda.frontend.core_client import EngineCoreClient, EngineDeadError, EngineStartupError
from pagoda.frontend.model_frontend import ModelFrontend
from pagoda.frontend.output_processor import OutputProcessor
from pagoda.inputs import PromptInput
from pagoda.outputs import EngineStats, RequestOutput
from pagoda.sampling_params import SamplingParams

__all__ = ["AsyncLLM", "EngineDeadError", "EngineStartupError", "RequestCounters"]


@dataclass
class RequestCounters:
    """Totals since start-up, for the server's /metrics."""

    prompt_tokens: int = 0
    """Prompt tokens of requests that got their first output token (once per request)."""
    generation_tokens: int = 0
    """Tokens the core generated."""
    finished: dict[str, int] = field(default_factory=dict)
    """Finished completions by finish reason ("stop", "length", "abort"); n > 1 counts n."""

    def count_finished(self, output: RequestOutput) -> None:
        for completion in output.outputs:
            reason = completion.finish_reason or "abort"
            self.finished[reason] = self.finished.get(reason, 0) + 1


class _Stream:
    """One request's outputs, handed from the reader thread to the consumer's event loop.

    Outputs are cumulative, so one the consumer has not taken yet is replaced by a newer
    one: a consumer that falls behind gets fewer, larger updates instead of a backlog.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.ready = asyncio.Event()
        self.pending: RequestOutput | Exception | None = None
        self.prompt_counted = False

    def deliver(self, item: RequestOutput | Exception) -> None:
        """On the consumer's loop: keep the newest output, or an error over any output."""
        if not isinstance(self.pending, Exception):
            self.pending = item
        self.ready.set()

    def put(self, item: RequestOutput | Exception) -> None:
        """From any thread."""
        with contextlib.suppress(RuntimeError):  # raised when the consumer's loop has closed
            self.loop.call_soon_threadsafe(self.deliver, item)

    async def next(self) -> RequestOutput | Exception:
        await self.ready.wait()
        self.ready.clear()
        item, self.pending = self.pending, None
        assert item is not None
        return item


def _deliver_all(items: list[tuple[_Stream, RequestOutput]]) -> None:
    for stream, output in items:
        stream.deliver(output)


class AsyncLLM:
    """Generate with asyncio while the engine core runs in its own process.

    Construction loads the tokenizer, starts the core and blocks until it is ready;
    a core that fails to start raises EngineStartupError with its traceback.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self.frontend = ModelFrontend.load(config)
        self.tokenizer: Any = self.frontend.tokenizer
        self.hf_config: Any = self.frontend.hf_config
        self.eos_token_id: int | None = self.frontend.eos_token_id
        self.generation_defaults: dict[str, Any] = self.frontend.generation_defaults
        self.vocab_size: int = self.frontend.vocab_size
        self.served_model_names: list[str] = (config.model.served_model_name
                                              or [self.frontend.source.name])
        self.model_name: str = self.served_model_names[0]
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._output_processor = OutputProcessor(self.tokenizer)
        self._counters = RequestCounters()
        self._last_stats = EngineStats(0, 0, 0.0, 0, 0, 0)
        self._dead_reason: str | None = None
        self._client = EngineCoreClient(config, self.frontend.source, self.hf_config,
                                        self._on_outputs, self._on_death)
        self.info: dict[str, Any] = self._client.info
        self.max_model_len: int = self._client.max_model_len
        self._input_processor = self.frontend.input_processor(self.max_model_len)

    # ---- requests ---------------------------------------------------------------------

    async def generate(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                       priority: int = 0) -> AsyncIterator[RequestOutput]:
        """Stream one request's cumulative outputs; the last has `finished` True.

        Bad input raises ValueError (TypeError for a prompt of the wrong type) on the first
        iteration, before the core hears of the request; so does a request id in use.
        Leaving early (break, cancellation, a client disconnect) aborts the request and
        frees its blocks. If the core dies, raises EngineDeadError.
        """
        stream = self._add_request(prompt, params, request_id, priority)
        finished = False
        try:
            while not finished:
                item = await stream.next()
                if isinstance(item, Exception):
                    raise item
                finished = item.finished
                yield item
        finally:
            if not finished:
                self._abort(request_id, stream)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its consumer gets a last output with finish_reason "abort"."""
        self._abort(request_id)

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return self.frontend.default_sampling_params()

    # ---- engine state -----------------------------------------------------------------

    async def stats(self) -> EngineStats:
        """A fresh snapshot from the core, taken after every message sent before it."""
        return await asyncio.wrap_future(self._client.call("stats"))

    @property
    def last_stats(self) -> EngineStats:
        """The snapshot that came with the core's latest step (never blocks or raises)."""
        return self._last_stats

    @property
    def counters(self) -> RequestCounters:
        """A copy of the request counters."""
        with self._lock:
            c = self._counters
            return RequestCounters(c.prompt_tokens, c.generation_tokens, dict(c.finished))

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._streams)

    async def reset_prefix_cache(self) -> bool:
        """Drop all cached prefix blocks; False if blocks are in use (nothing reset)."""
        return await asyncio.wrap_future(self._client.call("reset_prefix_cache"))

    @property
    def core_pid(self) -> int | None:
        return self._client.pid

    @property
    def errored(self) -> bool:
        """True once the core has died or been shut down."""
        return self._dead_reason is not None

    @property
    def is_healthy(self) -> bool:
        return self._dead_reason is None

    @property
    def dead_reason(self) -> str | None:
        return self._dead_reason

    def shutdown(self) -> None:
        """Stop the core; requests in flight raise EngineDeadError. Idempotent, and run
        at interpreter exit."""
        self._client.shutdown()

    # ---- internals --------------------------------------------------------------------

    def _add_request(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                     priority: int) -> _Stream:
        self._raise_if_dead()
        processed = self._input_processor.tokenize(prompt)
        requests = self._input_processor.make_requests(request_id, processed, params, priority)
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            self._raise_if_dead()
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._client.send(AddRequests(requests))
            self._output_processor.add(request_id, processed, requests)
            self._streams[request_id] = stream
        return stream

    def _abort(self, request_id: str, stream: _Stream | None = None) -> None:
        with self._lock:
            current = self._streams.get(request_id)
            if current is None or (stream is not None and current is not stream):
                return
            del self._streams[request_id]
            child_ids = self._output_processor.child_ids(request_id)
            final = self._output_processor.abort(request_id)
            self._tell_core(FinishRequests(child_ids, RequestStatus.FINISHED_ABORTED))
            if final is not None:
                self._counters.count_finished(final)
                current.put(final)

    def _on_outputs(self, message: StepOutputs) -> None:
        """Reader thread: detokenize, apply stop strings, hand outputs to their streams."""
        with self._lock:
            self._last_stats = message.stats
            self._counters.generation_tokens += sum(len(o.new_token_ids)
                                                    for o in message.outputs)
            outputs, stopped = self._output_processor.process(message.outputs)
            if stopped:
                self._tell_core(FinishRequests(stopped, RequestStatus.FINISHED_STOPPED))
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, RequestOutput]]] = {}
            for output in outputs:
                stream = self._streams[output.request_id]
                if not stream.prompt_counted and any(c.token_ids for c in output.outputs):
                    stream.prompt_counted = True
                    self._counters.prompt_tokens += len(output.prompt_token_ids)
                if output.finished:
                    del self._streams[output.request_id]
                    self._counters.count_finished(output)
                by_loop.setdefault(stream.loop, []).append((stream, output))
        for loop, items in by_loop.items():  # one wake-up per loop and step, not per request
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_deliver_all, items)

    def _on_death(self, reason: str) -> None:
        """Reader thread (or shutdown): fail every request in flight."""
        with self._lock:
            self._dead_reason = reason
            streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put(EngineDeadError(reason))

    def _tell_core(self, message: FinishRequests) -> None:
        """Best effort: a dead core has no blocks left to free."""
        with contextlib.suppress(EngineDeadError):
            self._client.send(message)

    def _raise_if_dead(self) -> None:
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
