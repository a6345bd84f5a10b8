"""What the front end keeps per request and in total: each request's stream of outputs,
handed from the cores' reader threads to the consumer's event loop, and the request
counters of /metrics."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from pagoda.outputs import PoolingRequestOutput, RequestOutput

Output = RequestOutput | PoolingRequestOutput


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
    timed_out: int = 0
    """Requests aborted at their time limit (also counted as "abort" in `finished`)."""
    core_restarts: int = 0
    """Dead engine cores replaced by new ones (`restart_engine`)."""

    def count_finished(self, output: RequestOutput | PoolingRequestOutput) -> None:
        reasons = ([output.finish_reason] if isinstance(output, PoolingRequestOutput)
                   else [c.finish_reason or "abort" for c in output.outputs])
        for reason in reasons:
            self.finished[reason] = self.finished.get(reason, 0) + 1


class Stream:
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


def deliver_all(items: list[tuple[Stream, Output]]) -> None:
    for stream, output in items:
        stream.deliver(output)
