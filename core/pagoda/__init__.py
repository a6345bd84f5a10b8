"""Pagoda: a hardware-agnostic LLM inference and serving engine."""

from pagoda.version import __version__

__all__ = ["__version__", "LLM", "SamplingParams", "PoolingParams", "StructuredOutputsParams",
           "RequestOutput", "CompletionOutput", "EmbeddingRequestOutput", "ScoringRequestOutput",
           "LoRARequest"]


def __getattr__(name: str):
    # The engine pulls in torch and transformers: import it only when asked for.
    if name == "LLM":
        from pagoda.entrypoints.llm import LLM

        return LLM
    if name == "SamplingParams":
        from pagoda.sampling_params import SamplingParams

        return SamplingParams
    if name == "PoolingParams":
        from pagoda.pooling_params import PoolingParams

        return PoolingParams
    if name == "LoRARequest":
        from pagoda.lora.request import LoRARequest

        return LoRARequest
    if name == "StructuredOutputsParams":
        from pagoda.structured import StructuredOutputsParams

        return StructuredOutputsParams
    if name in ("RequestOutput", "CompletionOutput", "EmbeddingRequestOutput",
                "ScoringRequestOutput"):
        from pagoda import outputs

        return getattr(outputs, name)
    raise AttributeError(f"module 'pagoda' has no attribute {name!r}")
