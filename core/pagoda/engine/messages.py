"""The messages between the front end and the engine-core process: plain, picklable data
over one duplex pipe (`pagoda.frontend.core_client` on one side,
`pagoda.engine.core_process` on the other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.outputs import EngineStats

# ---- parent -> core -------------------------------------------------------------------


@dataclass
class AddRequests:
    requests: list[Request]
    """All children of one prompt, in one message so `fork_of` links survive pickling."""


@dataclass
class FinishRequests:
    request_ids: list[str]
    status: RequestStatus
    """FINISHED_ABORTED (abort, disconnect) or FINISHED_STOPPED (a stop string)."""


@dataclass
class UtilityCall:
    call_id: int
    method: str
    """One of UTILITY_METHODS, called on the EngineCore with `args`."""
    args: tuple[Any, ...] = ()


@dataclass
class Shutdown:
    pass


UTILITY_METHODS = ("stats", "reset_prefix_cache", "add_lora", "remove_lora")

# ---- core -> parent -------------------------------------------------------------------


@dataclass
class Ready:
    info: dict[str, Any]
    max_model_len: int
    """The core's final value: it may lower the requested one to the KV cache capacity."""


@dataclass
class CoreFailed:
    """Start-up or a step raised; the process exits after sending this."""

    error: str
    traceback: str


@dataclass
class StepOutputs:
    outputs: list[EngineCoreOutput]
    stats: EngineStats

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as rows of field values, not as an object per output: several times
        cheaper for the core's loop to pickle and for the client's reader thread to
        unpickle, every step."""
        rows = [(o.request_id, o.new_token_ids, o.new_logprobs, o.new_prompt_logprobs,
                 o.finish_reason, o.stop_reason, o.num_cached_tokens, o.pooled)
                for o in self.outputs]
        return _unpack_step_outputs, (rows, self.stats)


def _unpack_step_outputs(rows: list[tuple[Any, ...]], stats: EngineStats) -> StepOutputs:
    return StepOutputs([EngineCoreOutput(*row) for row in rows], stats)


@dataclass
class UtilityResult:
    call_id: int
    value: Any
