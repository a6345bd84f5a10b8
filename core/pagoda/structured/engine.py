"""Grammars in the engine core: compiled off the step path, one matcher per request.

`Grammars` compiles on a thread of its own (xgrammar's compiler, whose cache holds each
compiled grammar by its text); a request waits in the scheduler until its grammar is
ready, while others run. The tokenizer the compiler needs is loaded by the first compile,
so an engine that never sees a structured request never loads it.

A request's matcher advances exactly when the scheduler appends a token to the request's
output, so it always stands after the request's known output: a preempted request keeps
its matcher (its recomputed prompt and output are already accepted), and a token dropped
because it was sampled for a request preempted since never reaches it. A step's bitmask
is filled from up-to-date matchers: at once when no step is in flight, else once the step
in flight has been read back and its tokens accepted (the step itself was launched
without it and samples when it comes; see `pagoda.engine.core`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pagoda.structured.check import xgrammar
from pagoda.structured.params import StructuredOutputsParams

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)


@dataclass
class GrammarBitmask:
    """One step's allowed tokens for the sampled requests that have a grammar: row i of
    `bitmask` (int32 [R, ceil(V / 32)], bit j of word k allows token 32k + j) belongs to
    `request_ids[i]`."""

    request_ids: list[str]
    bitmask: torch.Tensor


class RequestGrammar:
    """One request's grammar: its compilation, then its matcher."""

    def __init__(self, compiled: Future[Any], stop_token_ids: list[int]):
        self._compiled = compiled
        self._stop_token_ids = stop_token_ids
        self.matcher: Any = None
        self.error: str | None = None
        self.terminated = False

    @property
    def ready(self) -> bool:
        """Compiled and matching (False while compiling, and after a failure)."""
        if self.matcher is None and self.error is None and self._compiled.done():
            exc = self._compiled.exception()
            if exc is not None:
                self.error = f"{type(exc).__name__}: {exc}"
            else:
                self.matcher = xgrammar().GrammarMatcher(
                    self._compiled.result(), override_stop_tokens=self._stop_token_ids or None)
        return self.matcher is not None

    @property
    def failed(self) -> bool:
        return self._compiled.done() and not self.ready

    def accept(self, token: int) -> bool:
        """Advance over an output token; False if the grammar does not allow it."""
        ok = bool(self.matcher.accept_token(token))
        self.terminated = ok and self.matcher.is_terminated()
        return ok


class Grammars:
    """The engine core's grammar compiler and the bitmasks of each step."""

    def __init__(self, load_tokenizer: Callable[[], Any], vocab_size: int):
        """`load_tokenizer`: the HF tokenizer (called once, on the compile thread);
        `vocab_size`: the model's (its logits' width, which may exceed the tokenizer's)."""
        self._load_tokenizer = load_tokenizer
        self.vocab_size = vocab_size
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pagoda-grammar")
        self._compiler: Any = None
        self._batch_matcher: Any = None
        self._pending: set[Future[Any]] = set()
        self._new_failures = 0

    def _compile(self, kind: str, spec: str) -> Any:
        xgr = xgrammar()
        if self._compiler is None:
            info = xgr.TokenizerInfo.from_huggingface(self._load_tokenizer(),
                                                      vocab_size=self.vocab_size)
            self._compiler = xgr.GrammarCompiler(info, max_threads=min(8, os.cpu_count() or 1))
        compiler = self._compiler
        if kind == "json":
            return compiler.compile_json_schema(spec)
        if kind == "regex":
            return compiler.compile_regex(spec)
        if kind == "structural_tag":
            return compiler.compile_structural_tag(spec)
        return compiler.compile_grammar(spec)

    def start(self, params: StructuredOutputsParams, stop_token_ids: list[int]) -> RequestGrammar:
        """Start compiling a request's grammar (a grammar compiled before comes from the
        compiler's cache at once)."""
        future = self._pool.submit(self._compile, *params.key)
        self._pending.add(future)
        future.add_done_callback(self._done)
        return RequestGrammar(future, stop_token_ids)

    def _done(self, future: Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            self._new_failures += 1

    def take_new_failures(self) -> int:
        """How many compilations failed since the last call."""
        count, self._new_failures = self._new_failures, 0
        return count

    def wait(self, timeout: float) -> None:
        """Block until some compilation finishes, or `timeout` seconds (when nothing else
        can run, rather than spinning)."""
        pending = list(self._pending)
        if pending:
            wait(pending, timeout, return_when=FIRST_COMPLETED)

    def bitmask(self, request_ids: list[str], grammars: list[RequestGrammar],
                forced: dict[str, int] | None = None) -> GrammarBitmask:
        """The next token's bitmask of each request, from its matcher; a request in `forced`
        (request id -> token) may take only that token, with a grammar or without."""
        import torch

        forced = forced or {}
        ids = request_ids + [r for r in forced if r not in request_ids]
        bitmask = torch.full((len(ids), (self.vocab_size + 31) // 32), -1, dtype=torch.int32)
        if grammars:
            xgr = xgrammar()
            if self._batch_matcher is None:
                self._batch_matcher = xgr.BatchGrammarMatcher()
            self._batch_matcher.batch_fill_next_token_bitmask(
                [g.matcher for g in grammars], bitmask[:len(grammars)])
        for row, request_id in enumerate(ids):
            token = forced.get(request_id)
            if token is not None:
                bit = 1 << (token % 32)
                bitmask[row] = 0
                bitmask[row, token // 32] = bit - (1 << 32) if bit >= 1 << 31 else bit
        return GrammarBitmask(ids, bitmask)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
