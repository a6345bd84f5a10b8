"""The default Worker: one device of any platform, driven through its interfaces."""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from pagoda.attention import AttentionBackend
from pagoda.attention.backend import AttentionConfig, kv_cache_dtype_label
from pagoda.attention.selector import select_attention_backend
from pagoda.config import EngineConfig
from pagoda.config.values import parse_dtype, parse_kv_cache_dtype
from pagoda.distributed import (
    AttentionHeads,
    destroy_distributed,
    init_distributed,
    pp_group,
    tp_group,
)
from pagoda.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from pagoda.executor.base import Worker as WorkerBase
from pagoda.lora.manager import LoRAManager
from pagoda.lora.request import LoRARequest
from pagoda.model_source import ModelSource, resolve_model
from pagoda.models.decode_fusion import fuse_decode_layers
from pagoda.models.layers.attention import log_kv_cache_scales
from pagoda.models.layers.moe import has_experts
from pagoda.models.pooler import PoolingModel, whole_prompt_reason
from pagoda.ops import OpTable, use_ops
from pagoda.platforms import resolve_platform
from pagoda.platforms.platform import MemoryInfo, budget_within_utilization
from pagoda.platforms.step_padding import StepShape
from pagoda.quant import QuantMethod
from pagoda.quant.selector import select_quant_method
from pagoda.structured.engine import GrammarBitmask
from pagoda.worker.decode_graphs import DecodeGraphs, default_capture_sizes
from pagoda.worker.draft_runner import DraftModel, DraftRunner
from pagoda.worker.kv_caches import allocate_kv_caches
from pagoda.worker.model_loading import attention_shape, attention_soft_cap, build_model
from pagoda.worker.model_runner import ModelRunner
from pagoda.worker.pooling_runner import PoolingModelRunner
from pagoda.worker.profile_step import run_profile_step

logger = logging.getLogger(__name__)


class Worker(WorkerBase):
    config: EngineConfig

    def __init__(self, config: EngineConfig, source: ModelSource, hf_config: Any, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.source = source
        self.hf_config = hf_config
        self.runner: ModelRunner | PoolingModelRunner | None = None
        self.draft: DraftModel | None = None
        self.lora: LoRAManager | None = None
        """The LoRA adapters' slots (enable_lora), made with the model."""

    def init_device(self) -> None:
        self.platform = resolve_platform(self.config.device)
        parallel = self.config.parallel
        self.platform.init_worker(self.local_rank, parallel.num_devices)
        self.device = self.platform.torch_device(self.local_rank)
        if parallel.world_size > 1:
            assert self.distributed_init_method is not None
            init_distributed(self.platform.distributed_backend, self.distributed_init_method,
                             parallel.tensor_parallel_size, parallel.pipeline_parallel_size,
                             self.rank, self.device,
                             expert_parallel=parallel.enable_expert_parallel)
        torch.manual_seed(self.config.model.seed)
        logger.debug("Device %s ready (rank %d)", self.device, self.rank)

    def _dtypes(self, draft_config: Any = None) -> tuple[torch.dtype, torch.dtype]:
        """(weights', KV cache's) dtypes of the model; with `draft_config`, of the draft
        model (speculative_dtype, else the model's)."""
        dtype = self.platform.model_dtype(parse_dtype(self.config.model.dtype), self.hf_config)
        draft_dtype = self.config.speculative.speculative_dtype
        if draft_config is not None and draft_dtype is not None:
            dtype = self.platform.model_dtype(parse_dtype(draft_dtype), draft_config)
        kv_dtype = parse_kv_cache_dtype(self.config.cache.kv_cache_dtype) or dtype
        return dtype, kv_dtype

    def load_model(self) -> None:
        logger.debug("Building %s", self.source.name)
        start = time.perf_counter()
        dtype, kv_dtype = self._dtypes()
        self.model, self.attn_backend, self.quant_method, self.ops = self._build(
            self.source, self.hf_config, dtype, kv_dtype, self.config.model.quantization,
            self.config.model.runner)
        self.pooling = self.model if isinstance(self.model, PoolingModel) else None
        self.lora = self._lora_manager(dtype) if self.config.lora.enable_lora else None
        fused = fuse_decode_layers(self.model, self.platform)
        if fused:
            logger.info("%d decoder layers take the platform's fused decode step", fused)
        log_kv_cache_scales(self.model, kv_dtype)
        if self.config.parallel.enable_expert_parallel and not has_experts(self.model):
            logger.warning("enable_expert_parallel: %s has no mixture-of-experts layers here "
                           "(pipeline stage %d): the option changes nothing", self.source.name,
                           pp_group().rank)
        self.draft = self._load_draft() if self.config.speculative.speculative_method == \
            "draft" else None
        self.platform.synchronize(self.local_rank)  # the weights are on the device: no
        # step waits for them (or, on devices that trace lazily, carries their upload)
        self.kv_spec = self.model.kv_cache_spec(self.config.cache.block_size, kv_dtype)
        self.num_layers = self.model.num_attention_layers
        logger.info("Loaded %s as %s on %s with attention backend %s (%s, quantization %s) "
                    "in %.1f s", self.source.name, type(self.model).__name__,
                    self.platform.device_name(self.local_rank), self.attn_backend.name, dtype,
                    self.quant_method.name, time.perf_counter() - start)

    def _build(self, source: ModelSource, hf_config: Any, dtype: torch.dtype,
               kv_dtype: torch.dtype, quantization: str | None, runner: str
               ) -> tuple[torch.nn.Module, type[AttentionBackend], QuantMethod, OpTable]:
        """A model on this worker's device with its attention backend, quantization
        method and op table."""
        text_config = hf_config.get_text_config()  # (a multimodal config's text part)
        num_heads, num_kv_heads, head_size, sliding_window = attention_shape(text_config)
        tp = tp_group()
        heads = AttentionHeads(num_heads, num_kv_heads, tp.rank, tp.world_size)  # this rank's
        attn_config = AttentionConfig(
            heads.local_heads, heads.local_kv_heads, head_size, dtype, kv_dtype,
            self.config.cache.block_size, sliding_window, attention_soft_cap(text_config),
        )
        attn_backend = select_attention_backend(self.platform, attn_config,
                                                self.config.attention_backend)
        quantization = self._default_quantization(source, quantization, dtype)
        quant_method = select_quant_method(self.platform, quantization, hf_config)
        ops = OpTable(self.platform.name, dtype=dtype)
        with use_ops(ops):
            model = build_model(
                source, hf_config, dtype=dtype, device=self.device, attn_backend=attn_backend,
                load_format=self.config.model.load_format, seed=self.config.model.seed,
                quant_method=quant_method, runner=runner, pooler_config=self.config.pooler,
                model_impl=self.config.model.model_impl,
            )
        return model, attn_backend, quant_method, ops

    def _default_quantization(self, source: ModelSource, quantization: str | None,
                              dtype: torch.dtype) -> str | None:
        """`quantization`, or, when none is named, "gguf" for a GGUF file where the platform
        runs its quantized weights faster than dense ones (`Platform.keeps_gguf_quantized`)."""
        model = self.config.model
        if (quantization is None and source.format == "gguf" and model.load_format != "dummy"
                and model.model_impl != "transformers"
                and self.platform.keeps_gguf_quantized(dtype)):
            logger.info("GGUF weights stay quantized (faster here in %s; --quantization none "
                        "for dense weights)", dtype)
            return "gguf"
        return quantization

    def _load_draft(self) -> DraftModel:
        """The draft model of speculative_method draft, loaded like the model (dtype and
        quantization: the speculative ones, else the model's)."""
        spec = self.config.speculative
        assert spec.speculative_model is not None
        source = resolve_model(spec.speculative_model)
        hf_config = source.hf_config()
        dtype, kv_dtype = self._dtypes(hf_config)
        try:  # (a model that pools is refused here: it cannot generate)
            model, attn_backend, quant_method, _ = self._build(
                source, hf_config, dtype, kv_dtype,
                spec.speculative_quantization or self.config.model.quantization, "generate")
        except ValueError as exc:
            raise ValueError(f"speculative_model {source.name}: {exc}") from exc
        log_kv_cache_scales(model, kv_dtype)
        logger.info("Loaded the draft model %s as %s (%s, attention backend %s, "
                    "quantization %s)", source.name, type(model).__name__, dtype,
                    attn_backend.name, quant_method.name)
        return DraftModel(model, attn_backend,
                          model.kv_cache_spec(self.config.cache.block_size, kv_dtype))

    def _lora_manager(self, dtype: torch.dtype) -> LoRAManager:
        """The LoRA slots of every adapted layer, and a per-token slot buffer as long as the
        longest (padded) step."""
        sched = self.config.scheduler
        longest = StepShape(sched.max_num_batched_tokens, sched.max_num_seqs, 1)
        padding = self.platform.step_padding(longest)
        tokens = max(sched.max_num_batched_tokens, sched.max_num_seqs,
                     padding.pad(longest).num_tokens if padding is not None else 0)
        with use_ops(self.ops):
            return LoRAManager(self.model, self.config.lora, self.hf_config, dtype, self.device,
                               tokens)

    def profile_step_memory(self) -> int:
        """Transient device memory of the largest step the scheduler may send, measured by
        running one (which also compiles the prefill kernels); 0 where not measurable."""
        if self.platform.peak_memory_bytes(self.local_rank) is None:
            return 0
        self.platform.synchronize(self.local_rank)
        self.platform.reset_peak_memory(self.local_rank)
        baseline = self.platform.peak_memory_bytes(self.local_rank) or 0
        sched = self.config.scheduler
        start = time.perf_counter()
        for model, kv_spec, attn_backend in [(self.model, self.kv_spec, self.attn_backend)] + (
                [(self.draft.model, self.draft.kv_spec, self.draft.attn_backend)]
                if self.draft else []):  # one after the other: the larger peak counts
            run_profile_step(model, kv_spec, attn_backend, self.device,
                             num_tokens=sched.max_num_batched_tokens,
                             max_seq_len=self.config.model.max_model_len,
                             num_sampled=0 if self.pooling else sched.max_num_seqs)
        self.platform.synchronize(self.local_rank)
        peak = (self.platform.peak_memory_bytes(self.local_rank) or 0) - baseline
        logger.info("Profiling step of %d tokens: %.2f GiB of activations, %.1f s "
                    "(compiling its kernels included)", sched.max_num_batched_tokens,
                    peak / 2**30, time.perf_counter() - start)
        return max(peak, 0)

    def determine_num_kv_blocks(self) -> int:
        cache = self.config.cache
        if cache.num_kv_blocks is not None:
            return cache.num_kv_blocks
        # More than every sequence at full length can never be in use at once.
        useful = self.config.scheduler.max_num_seqs * self.config.model.max_model_len
        if self.num_layers == 0:  # an encoder: blocks only count tokens, they hold nothing
            return -(-useful // self.kv_spec.block_size)
        per_block = self.kv_spec.block_bytes * self.num_layers
        if self.draft is not None:  # the draft's cache has the same blocks
            per_block += self.draft.block_bytes
        if cache.kv_cache_memory is not None:
            budget = cache.kv_cache_memory
        elif cache.memory_fraction is not None:
            memory = self.platform.memory_info(self.local_rank)
            budget = int(memory.available * cache.memory_fraction)
        else:
            step_peak = self.profile_step_memory()
            measured = self.platform.memory_info(self.local_rank)
            memory = MemoryInfo(measured.total, max(0, measured.available - step_peak))
            if cache.gpu_memory_utilization is not None:
                budget = budget_within_utilization(memory, cache.gpu_memory_utilization)
            else:
                budget = self.platform.default_kv_cache_bytes(memory)
        num_blocks = min(budget // per_block, -(-useful // self.kv_spec.block_size))
        if num_blocks < 1:
            raise ValueError(
                f"KV cache budget of {budget} bytes is below one block ({per_block} bytes for "
                f"{self.num_layers} layers); raise --kv-cache-memory"
            )
        logger.info("KV cache: %d blocks of %d tokens in %s (%d bytes a block over %d layers) "
                    "from a budget of %.2f GiB", num_blocks, self.kv_spec.block_size,
                    kv_cache_dtype_label(self.kv_spec.dtype), per_block, self.num_layers,
                    budget / 2**30)
        return num_blocks

    def initialize_cache(self, num_blocks: int) -> None:
        kv_caches = allocate_kv_caches(self.attn_backend, self.kv_spec, num_blocks,
                                       self.num_layers, self.device)
        builder = self.attn_backend.get_builder_cls()(self.kv_spec, self.device)
        sched, block_size = self.config.scheduler, self.kv_spec.block_size
        max_len = min(self.config.model.max_model_len or num_blocks * block_size,
                      num_blocks * block_size)
        max_blocks = -(-max_len // block_size)  # of one sequence
        padding = self.platform.step_padding(
            StepShape(sched.max_num_batched_tokens, sched.max_num_seqs, max_blocks))
        if self.pooling is not None:
            self.runner = PoolingModelRunner(self.model, kv_caches, builder, block_size,
                                             self.device, self.platform, padding)
            return
        with use_ops(self.ops):  # the sampler resolves the platform's sampling kernel
            self.runner = ModelRunner(
                self.model, kv_caches, builder, block_size, self.hf_config.vocab_size,
                self.device, self.platform, padding, seed=self.config.model.seed,
            )
        self.runner.lora = self.lora
        if self.draft is not None:
            self.runner.drafter = self.draft.runner(num_blocks, self.device, self.runner.sampler,
                                                    self.runner.sample_device, padding)
        self._capture_graphs(max_blocks)

    def _capture_graphs(self, max_blocks: int) -> None:
        """Decode steps (and with speculation, verify steps) of the model and of its draft
        as device graphs, where the platform records them and the backend replays them;
        not between pipeline stages (they hand activations on between steps' graphs), and
        with tensor parallelism only where graphs hold the platform's collectives."""
        capture = self.platform.graph_capture()
        parallel = self.config.parallel
        if (capture is None or self.config.enforce_eager
                or parallel.pipeline_parallel_size > 1
                or (parallel.tensor_parallel_size > 1
                    and not self.platform.graphs_hold_collectives)):
            return
        assert isinstance(self.runner, ModelRunner)
        sched = self.config.scheduler
        sizes = self.config.graph_batch_sizes or default_capture_sizes(sched.max_num_seqs)
        families = [(1, sizes)]
        spec = self.config.speculative
        if spec.speculative_method is not None:
            # Verify steps: up to 1 + k tokens a sequence, as many sequences as above.
            width = 1 + spec.num_speculative_tokens
            families.append((width, sorted({min(s * width, sched.max_num_batched_tokens)
                                            for s in sizes})))
        runners: list[tuple[ModelRunner | DraftRunner, type[AttentionBackend]]] = [
            (self.runner, self.attn_backend)]
        if self.draft is not None:
            assert self.runner.drafter is not None
            runners.append((self.runner.drafter, self.draft.attn_backend))
        captures: list[DecodeGraphs] = []
        for runner, backend in runners:
            for width, family_sizes in families:
                if backend.supports_graph_capture and (
                        width == 1 or backend.supports_multi_token_graphs):
                    runner.graphs.append(DecodeGraphs(
                        runner.model, runner.kv_caches, runner.builder, capture, family_sizes,
                        max_blocks, self.kv_spec.block_size, self.device, width))
                    captures.append(runner.graphs[-1])
        # Largest first, all in one pool: smaller graphs reuse the largest's memory.
        pool = None
        for graphs in sorted(captures, key=lambda g: -g.max_num_tokens):
            pool = graphs.capture_all(pool)

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        assert self.runner is not None, "initialize_cache() must run before execute_model()"
        return self.runner.execute_model(scheduler_output)

    def provide_token_bitmask(self, bitmask: GrammarBitmask | None) -> Any:
        """The token bitmask of the launched step that awaits one; it samples now."""
        assert isinstance(self.runner, ModelRunner), "only generating models have grammars"
        return self.runner.provide_token_bitmask(bitmask)

    def add_lora(self, lora: LoRARequest) -> str | None:
        """Read adapter `lora` into host memory; what is wrong with it, or None."""
        if self.lora is None:
            return "LoRA is off (start the engine with enable_lora)"
        try:
            self.lora.add(lora)
        except (ValueError, OSError, KeyError) as exc:
            return str(exc)
        return None

    def remove_lora(self, lora_int_id: int) -> None:
        if self.lora is not None:
            self.lora.remove(lora_int_id)

    def describe(self) -> dict[str, Any]:
        return {
            "platform": self.platform.name,
            "device": self.platform.device_name(self.local_rank),
            "model_class": type(self.model).__name__,
            "attention_backend": self.attn_backend.name,
            "dtype": str(self._dtypes()[0]).removeprefix("torch."),
            "kv_cache_dtype": kv_cache_dtype_label(self._dtypes()[1]),
            "quantization": self.quant_method.name,
            "graph_batch_sizes": self.runner.graphs[0].sizes
            if isinstance(self.runner, ModelRunner) and self.runner.graphs else [],
            "runner": "pooling" if self.pooling else "generate",
            "kv_cache_layers": self.num_layers,
            "pooler": self.pooling.pooler_spec if self.pooling else None,
            "whole_prompt_reason": whole_prompt_reason(self.pooling) if self.pooling else None,
            "ops": dict(self.ops.providers),
            "tensor_parallel_size": tp_group().world_size,
            "expert_parallel": tp_group().expert_parallel,
            "pipeline_stage": pp_group().rank,
            "draft_model_class": type(self.draft.model).__name__ if self.draft else None,
        }

    def shutdown(self) -> None:
        if self.config.parallel.world_size > 1:
            destroy_distributed()
