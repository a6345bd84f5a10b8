"""On-device sampling for a batch of requests with different parameters."""

from pagoda.sample.batch import SamplingBatch
from pagoda.sample.logprobs import (
    LogprobsLists,
    LogprobsTensors,
    compute_logprobs,
    compute_prompt_logprobs,
)
from pagoda.sample.sampler import Sampler, SamplerOutput
from pagoda.sample.state import SamplingState

__all__ = [
    "LogprobsLists",
    "LogprobsTensors",
    "Sampler",
    "SamplerOutput",
    "SamplingBatch",
    "SamplingState",
    "compute_logprobs",
    "compute_prompt_logprobs",
]
