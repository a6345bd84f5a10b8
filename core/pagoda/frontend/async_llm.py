"""`AsyncLLM`: the asyncio front end the server uses, over engine cores in processes of
their own (one, or `data_parallel_size` behind a load balancer).

The front end tokenizes and validates on the caller's event loop, and detokenizes and
applies stop strings on the cores' reader threads as each step's outputs arrive; each
request's outputs reach its consumer through a queue on the consumer's own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.messages import FinishRequests, StepOutputs
from pagoda.engine.request import Request, RequestStatus
from pagoda.frontend.core_client import EngineDeadError, EngineOverloadedError, EngineStartupError
from pagoda.frontend.engine_cores import EngineCores, combined_stats
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.frontend.model_frontend import ModelFrontend
from pagoda.frontend.output_processor import OutputProcessor
from pagoda.inputs import PromptInput
from pagoda.lora.request import LoRARequest
from pagoda.outputs import EngineStats, PoolingRequestOutput, RequestOutput
from pagoda.pooling import PoolerSpec
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

Output = RequestOutput | PoolingRequestOutput

__all__ = ["AsyncLLM", "EngineDeadError", "EngineOverloadedError", "EngineStartupError",
           "RequestCounters"]


@dataclass
class RequestCounters:
    """Totals since start-up, for the server's /metrics."""

    prompt_tokens: int = 0
    """Prompt tokens of requests that got their first output token or their pooled output
    (once per request)."""
    generation_tokens: int = 0
    """Tokens the core generated."""
    finished: dict[str, int] = field(default_factory=dict)
    """Finished completions (and pooling requests) by finish reason ("stop", "length",
    "abort"); n > 1 counts n."""

    def count_finished(self, output: RequestOutput | PoolingRequestOutput) -> None:
        reasons = ([output.finish_reason] if isinstance(output, PoolingRequestOutput)
                   else [c.finish_reason or "abort" for c in output.outputs])
        for reason in reasons:
            self.finished[reason] = self.finished.get(reason, 0) + 1


class _Stream:
    """One request's outputs, handed from the reader thread to the consumer's event loop.

    Outputs are cumulative, so one the consumer has not taken yet is replaced by a newer
    one: a consumer that falls behind gets fewer, larger updates instead of a backlog.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.ready = asyncio.Event()
        self.pending: Output | Exception | None = None
        self.prompt_counted = False

    def deliver(self, item: Output | Exception) -> None:
        """On the consumer's loop: keep the newest output, or an error over any output."""
        if not isinstance(self.pending, Exception):
            self.pending = item
        self.ready.set()

    def put(self, item: Output | Exception) -> None:
        """From any thread."""
        with contextlib.suppress(RuntimeError):  # raised when the consumer's loop has closed
            self.loop.call_soon_threadsafe(self.deliver, item)

    async def next(self) -> Output | Exception:
        await self.ready.wait()
        self.ready.clear()
        item, self.pending = self.pending, None
        assert item is not None
        return item


def _deliver_all(items: list[tuple[_Stream, Output]]) -> None:
    for stream, output in items:
        stream.deliver(output)


class AsyncLLM:
    """Generate with asyncio while the engine cores run in processes of their own.

    Construction loads the tokenizer, starts the cores and blocks until they are ready;
    a core that fails to start raises EngineStartupError with its traceback. One core
    dying fails every request in flight, as the engine is then dead.
    """

    def __init__(self, config: EngineConfig):
        self.config = config
        self.frontend = ModelFrontend.load(config, core_in_process=False)
        self.tokenizer: Any = self.frontend.tokenizer
        self.generation_defaults: dict[str, Any] = self.frontend.generation_defaults
        self.served_model_names: list[str] = (config.model.served_model_name
                                              or [self.frontend.source.name])
        self.model_name: str = self.served_model_names[0]
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._output_processor = OutputProcessor(self.tokenizer)
        self._counters = RequestCounters()
        self._last_stats = [EngineStats(0, 0, 0.0, 0, 0, 0)] * (
            config.parallel.data_parallel_size)
        self._dead_reason: str | None = None
        sched = config.scheduler
        self._max_requests = (None if sched.max_waiting_requests is None else
                              (sched.max_num_seqs + sched.max_waiting_requests)
                              * config.parallel.data_parallel_size)
        """Most requests in the engine at once (running and waiting), or None."""
        self._cores = EngineCores(config, self.frontend.source, self._on_outputs,
                                  self._on_death, self.tokenizer)
        self.info: dict[str, Any] = self._cores.info
        self.frontend.set_model_facts(self.info["vocab_size"], self.info["eos_token_id"],
                                      self.info["lora_base_shapes"])
        self.vocab_size: int = self.frontend.vocab_size
        self.eos_token_id: int | None = self.frontend.eos_token_id
        self.max_model_len: int = self._cores.max_model_len
        self.pooler: PoolerSpec | None = self.info["pooler"]
        """What the model outputs if it is a pooling model; None: it generates."""
        self._input_processor = self.frontend.input_processor(self.max_model_len, self.pooler,
                                                              config.lora)

    # ---- requests ---------------------------------------------------------------------

    async def generate(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                       priority: int = 0, lora_request: LoRARequest | None = None
                       ) -> AsyncIterator[RequestOutput]:
        """Stream one request's cumulative outputs; the last has `finished` True.

        Bad input raises ValueError (TypeError for a prompt of the wrong type) on the first
        iteration, before the core hears of the request; so does a request id in use.
        Leaving early (break, cancellation, a client disconnect) aborts the request and
        frees its blocks. If the core dies, raises EngineDeadError. A `lora_request` not
        seen before is added first (`add_lora_adapter`).
        """
        check = self._input_processor.check_adapter
        if lora_request is not None and check is not None and not check.known(lora_request):
            await self.add_lora_adapter(lora_request)
        stream = self._add_request(prompt, params, request_id, priority, lora_request)
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

    async def encode(self, prompt: PromptInput | ProcessedPrompt, params: PoolingParams,
                     request_id: str, priority: int = 0) -> PoolingRequestOutput:
        """A pooling model's output for one prompt: its embedding, or a text pair's score
        (`tokenize_pair`). Bad input raises ValueError (TypeError for a prompt of the
        wrong type) before the core hears of the request. Cancellation aborts it; so does
        `abort`, after which the output's data is None. If the core dies, raises
        EngineDeadError."""
        self._raise_if_dead()
        processed = (prompt if isinstance(prompt, ProcessedPrompt)
                     else self._input_processor.tokenize(prompt))
        request = self._input_processor.make_pooling_request(request_id, processed, params,
                                                             priority)
        stream = self._submit(request_id, [request],
                              lambda: self._output_processor.add_pooling(request_id, processed))
        finished = False
        try:
            item = await stream.next()
            if isinstance(item, Exception):
                raise item
            finished = True
            assert isinstance(item, PoolingRequestOutput)
            return item
        finally:
            if not finished:
                self._abort(request_id, stream)

    def tokenize_pair(self, text_1: str, text_2: str) -> ProcessedPrompt:
        """A text pair as the model's tokenizer encodes it for a cross-encoder."""
        return self._input_processor.tokenize_pair(text_1, text_2)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its consumer gets a last output with finish_reason "abort"."""
        self._abort(request_id)

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return self.frontend.default_sampling_params()

    # ---- engine state -----------------------------------------------------------------

    async def stats(self) -> EngineStats:
        """A fresh snapshot of the cores together, taken after every message sent before
        it."""
        return combined_stats(await self.core_stats())

    async def core_stats(self) -> list[EngineStats]:
        """A fresh snapshot of each core (data parallelism: one per core)."""
        futures = self._cores.call("stats")
        return list(await asyncio.gather(*map(asyncio.wrap_future, futures)))

    @property
    def last_stats(self) -> EngineStats:
        """The snapshots that came with each core's latest step, combined (never blocks or
        raises)."""
        return combined_stats(self._last_stats)

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
        """Drop all cached prefix blocks; False if a core has blocks in use (that core's
        cache is left as it is)."""
        futures = self._cores.call("reset_prefix_cache")
        return all(await asyncio.gather(*map(asyncio.wrap_future, futures)))

    @property
    def core_pid(self) -> int | None:
        """The (first) engine core's process id."""
        return self._cores.pids[0]

    @property
    def core_pids(self) -> list[int | None]:
        return self._cores.pids

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
        """Stop the cores; requests in flight raise EngineDeadError. Idempotent, and run
        at interpreter exit."""
        self._cores.shutdown()

    async def add_lora_adapter(self, lora: LoRARequest) -> None:
        """Check `lora` (ValueError naming what is wrong, or that LoRA is off) and have the
        engine cores read it into host memory, so that its first request does not wait for
        the disk."""
        check = self._input_processor.check_adapter
        if check is None or not check.enabled:
            raise ValueError("LoRA is off (start the engine with enable_lora)")
        check(lora)
        futures = self._cores.call("add_lora", lora)
        problem = next(filter(None, await asyncio.gather(*map(asyncio.wrap_future, futures))),
                       None)
        if problem is not None:
            check.forget(lora.lora_int_id)
            raise ValueError(problem)

    async def remove_lora_adapter(self, lora_int_id: int) -> None:
        """The cores drop the adapter's host copies; the id may name another adapter from
        now on."""
        if self._input_processor.check_adapter is not None:
            self._input_processor.check_adapter.forget(lora_int_id)
        await asyncio.gather(*map(asyncio.wrap_future,
                                  self._cores.call("remove_lora", lora_int_id)))

    # ---- internals --------------------------------------------------------------------

    def _add_request(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                     priority: int, lora_request: LoRARequest | None = None) -> _Stream:
        self._raise_if_dead()
        processed = self._input_processor.tokenize(prompt)
        requests = self._input_processor.make_requests(request_id, processed, params, priority,
                                                       lora_request=lora_request)
        return self._submit(request_id, requests, lambda: self._output_processor.add(
            request_id, processed, requests))

    def _submit(self, request_id: str, requests: list[Request],
                track: Callable[[], None]) -> _Stream:
        """Send a request's core requests and `track` it in the output processor."""
        stream = _Stream(asyncio.get_running_loop())
        with self._lock:
            self._raise_if_dead()
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            if self._max_requests is not None and len(self._streams) >= self._max_requests:
                raise EngineOverloadedError(
                    f"the engine holds {len(self._streams)} requests, as many as it may "
                    f"(max_num_seqs running and max_waiting_requests waiting): try again "
                    f"later")
            self._cores.add(request_id, requests)
            track()
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
            with contextlib.suppress(EngineDeadError):  # a dead core frees nothing
                self._cores.finish(request_id, FinishRequests(
                    child_ids, RequestStatus.FINISHED_ABORTED))
            self._cores.forget(request_id)
            if final is not None:
                self._counters.count_finished(final)
                current.put(final)

    def _on_outputs(self, core: int, message: StepOutputs) -> None:
        """Reader thread of `core`: detokenize, apply stop strings, hand outputs to their
        streams."""
        with self._lock:
            if self._dead_reason is not None:
                return  # another core died: every stream has its error already
            self._last_stats[core] = message.stats
            self._counters.generation_tokens += sum(len(o.new_token_ids)
                                                    for o in message.outputs)
            outputs, stopped = self._output_processor.process(message.outputs)
            if stopped:
                with contextlib.suppress(EngineDeadError):  # a dead core frees nothing
                    self._cores.clients[core].send(FinishRequests(
                        stopped, RequestStatus.FINISHED_STOPPED))
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, Output]]] = {}
            for output in outputs:
                stream = self._streams[output.request_id]
                if not stream.prompt_counted and (isinstance(output, PoolingRequestOutput)
                                                  or any(c.token_ids for c in output.outputs)):
                    stream.prompt_counted = True
                    self._counters.prompt_tokens += len(output.prompt_token_ids)
                if output.finished:
                    del self._streams[output.request_id]
                    self._cores.forget(output.request_id)
                    self._counters.count_finished(output)
                by_loop.setdefault(stream.loop, []).append((stream, output))
        for loop, items in by_loop.items():  # one wake-up per loop and step, not per request
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_deliver_all, items)

    def _on_death(self, reason: str) -> None:
        """Reader thread (or shutdown) of a core: fail every request in flight. The first
        core to go gives the reason."""
        with self._lock:
            if self._dead_reason is None:
                self._dead_reason = reason
            reason = self._dead_reason
            streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put(EngineDeadError(reason))

    def _raise_if_dead(self) -> None:
        if self._dead_reason is not None:
            raise EngineDeadError(self._dead_reason)
