"""The engines a benchmark can drive: Pagoda's LLM, and HF transformers `generate`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from pagoda.bench.config import OfflineBenchConfig
from pagoda.bench.dataset import BenchRequest
from pagoda.config import EngineConfig


@dataclass
class RunResult:
    """One pass over a workload."""

    elapsed: float
    prompt_tokens: int
    output_tokens: int
    num_requests: int
    request_latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)


BENCH_SCHEMA = {
    "type": "object",
    "properties": {"records": {"type": "array", "minItems": 32, "items": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                       "score": {"type": "number", "minimum": 0, "maximum": 100},
                       "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}},
        "required": ["id", "name", "score", "tags"]}}},
    "required": ["records"],
}
"""`--structured-output json-schema`: nested, with numbers, strings, enums and arrays; at
least 32 records, so that no output can end before a few hundred tokens and runs with and
without the schema generate the same number of tokens."""


class PagodaBackend:
    name = "pagoda"

    def __init__(self, engine: EngineConfig, bench: OfflineBenchConfig):
        from pagoda.config.fields import flat_values
        from pagoda.entrypoints.llm import LLM
        from pagoda.structured import StructuredOutputsParams

        self.llm = LLM(**flat_values(engine))
        self.temperature = bench.temperature
        self.grammar = (StructuredOutputsParams(json=BENCH_SCHEMA)
                        if bench.structured_output == "json-schema" else None)
        info = self.llm.engine.core.info
        self.description = (f"pagoda on {info['platform']} ({info['device']}), "
                            f"{info['dtype']}, attention {info['attention_backend']}, "
                            f"KV cache {info['kv_cache_tokens']} tokens"
                            + (", a JSON schema on every request" if self.grammar else ""))

    @property
    def vocab_size(self) -> int:
        return self.llm.engine.hf_config.vocab_size

    @property
    def special_token_ids(self) -> frozenset[int]:
        return frozenset(self.llm.get_tokenizer().all_special_ids)

    def run(self, requests: list[BenchRequest]) -> RunResult:
        from pagoda.sampling_params import SamplingParams

        params = [SamplingParams(temperature=self.temperature, max_tokens=r.output_len,
                                 ignore_eos=True, detokenize=False,
                                 structured_outputs=self.grammar) for r in requests]
        prompts = [{"prompt_token_ids": r.prompt_token_ids} for r in requests]
        start = time.perf_counter()
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        latencies = [o.metrics["last_token_time"] - o.metrics["arrival_time"] for o in outputs]
        ttfts = [o.metrics["first_token_time"] - o.metrics["arrival_time"] for o in outputs
                 if "first_token_time" in o.metrics]
        return RunResult(elapsed, sum(len(r.prompt_token_ids) for r in requests),
                         sum(len(o.outputs[0].token_ids) for o in outputs), len(requests),
                         latencies, ttfts)


class HFBackend:
    """HF transformers `generate`, static batches of `--hf-batch-size`, left padding."""

    name = "hf"

    def __init__(self, engine: EngineConfig, bench: OfflineBenchConfig):
        from transformers import AutoModelForCausalLM

        if bench.structured_output != "none":
            raise SystemExit("--structured-output: the hf backend cannot constrain its output")

        from pagoda.config.values import parse_dtype
        from pagoda.model_source import resolve_model
        from pagoda.platforms import resolve_platform

        platform = resolve_platform(engine.device)
        self.device = platform.torch_device()
        source = resolve_model(engine.model.model)
        self.config = source.hf_config()
        self.dtype = platform.model_dtype(parse_dtype(engine.model.dtype), self.config)
        if engine.model.load_format == "dummy":
            with self.device:  # random init on the device: an 8B model takes minutes on a CPU
                model = AutoModelForCausalLM.from_config(self.config, dtype=self.dtype)
        elif source.format == "gguf":
            model = AutoModelForCausalLM.from_pretrained(
                source.path.parent, gguf_file=source.path.name, dtype=self.dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(source.path, dtype=self.dtype)
        self.model = model.to(self.device).eval()
        self.model.generation_config.cache_implementation = bench.hf_cache
        self.batch_size = bench.hf_batch_size
        self.temperature = bench.temperature
        self.description = (f"HF transformers generate on {self.device}, "
                            f"{str(self.dtype).removeprefix('torch.')}, "
                            f"batch {self.batch_size}, {bench.hf_cache} cache")
        if getattr(self.config, "num_experts", None):  # which experts kernel HF chose
            self.description += f", experts {model.config._experts_implementation}"

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @torch.inference_mode()
    def run(self, requests: list[BenchRequest]) -> RunResult:
        start = time.perf_counter()
        latencies = []
        for i in range(0, len(requests), self.batch_size):
            chunk = requests[i : i + self.batch_size]
            self._generate(chunk)
            done = time.perf_counter() - start
            latencies.extend([done] * len(chunk))
        elapsed = time.perf_counter() - start
        return RunResult(elapsed, sum(len(r.prompt_token_ids) for r in requests),
                         sum(r.output_len for r in requests), len(requests), latencies)

    def _generate(self, chunk: list[BenchRequest]) -> Any:
        width = max(len(r.prompt_token_ids) for r in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, r in enumerate(chunk):
            ids[row, width - len(r.prompt_token_ids):] = torch.tensor(r.prompt_token_ids)
            mask[row, width - len(r.prompt_token_ids):] = 1
        new = max(r.output_len for r in chunk)
        sampling: dict[str, Any] = {"do_sample": False}
        if self.temperature > 0:
            sampling = {"do_sample": True, "temperature": self.temperature, "top_k": 0,
                        "top_p": 1.0}
        return self.model.generate(
            ids.to(self.device), attention_mask=mask.to(self.device), max_new_tokens=new,
            min_new_tokens=new, eos_token_id=None, pad_token_id=0, **sampling,
        )


BACKENDS = {"pagoda": PagodaBackend, "hf": HFBackend}
