"""pagoda-cuda on an NVIDIA GPU (run by ci/gpu.sh): the platform's real values, every kernel
provider and attention backend against core's references, the certification suite, and
greedy tokens identical to the CPU platform's through the whole engine."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.kernels.triton_providers import TRITON_OPS, TRITON_QUANT_OPS  # noqa: E402
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda.ops.registry import unusable_reason  # noqa: E402
from pagoda.platforms import Platform, resolve_platform  # noqa: E402
from pagoda.platforms.platform import budget_within_utilization  # noqa: E402
from pagoda.plugins import get_registries  # noqa: E402
from pagoda.testing import (  # noqa: E402
    DTYPES,
    BackendEntry,
    ProviderEntry,
    attention_backends,
    check_attention_backend,
    check_kernel_provider,
    dtype_name,
    kernel_providers,
)
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs an NVIDIA GPU, its driver and a CUDA build of torch "
                              "(run ci/gpu.sh on a GPU machine)"),
]

# Parametrized at collection, when the cuda probe may be unusable: then every case skips.
PROVIDERS = kernel_providers("cuda") if torch.cuda.is_available() else []
BACKENDS = attention_backends("cuda") if torch.cuda.is_available() else []


@pytest.fixture(scope="module")
def cuda() -> Platform:
    return resolve_platform("cuda")


def test_capabilities(cuda: Platform) -> None:
    assert (cuda.name, cuda.device_type) == ("cuda", "cuda")
    major, minor = torch.cuda.get_device_capability(0)
    assert cuda.supported_dtypes[0] == (torch.bfloat16 if major >= 8 else torch.float16)
    assert cuda.supports_graph_capture and cuda.distributed_backend == "nccl"
    assert get_registries().probes.get("cuda").spec.visible_devices_env == (
        "CUDA_VISIBLE_DEVICES",)
    assert cuda.preferred_attention_backends[0] == "triton"
    assert cuda.device_count() == torch.cuda.device_count()
    assert cuda.device_name(0).startswith(f"{torch.cuda.get_device_name(0)} (")
    assert cuda.device_name(0).endswith(f" GiB, sm_{major}{minor})")
    assert cuda.torch_device(1) == torch.device("cuda", 1)
    described = json.loads(json.dumps(cuda.describe()))
    assert described["capability"] == f"{major}.{minor}"
    cuda.set_device(0)
    cuda.synchronize(0)


def test_memory(cuda: Platform) -> None:
    mem = cuda.memory_info(0)
    free, total = torch.cuda.mem_get_info(0)
    assert mem.total == total and 0 < mem.available <= total
    assert cuda.default_kv_cache_bytes(mem) == budget_within_utilization(mem, 0.9)
    cuda.reset_peak_memory(0)
    x = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    assert cuda.peak_memory_bytes(0) >= x.numel()


def test_ops_resolve_to_triton() -> None:
    """Every op to the Triton kernels, but woq_linear to the CUDA C++ kernel where it is
    built and runs (it hands Triton what it does not take), and fp8_linear too where its
    switch turns that kernel on."""
    from pagoda_cuda import fp8_ops
    from pagoda_cuda.native import unavailable

    providers = OpTable("cuda", dtype=torch.bfloat16).providers
    native = {"woq_linear": "cuda/cuda_native"} if unavailable() is None else {}
    if fp8_ops.unavailable() is None:
        native["fp8_linear"] = "cuda/cuda_native"
    assert providers == {op: "cuda/triton" if op in (*TRITON_OPS, *TRITON_QUANT_OPS)
                         else "core/reference" for op in OPS} | native


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", PROVIDERS, ids=lambda e: e.id)
def test_provider_matches_reference(entry: ProviderEntry, dtype: torch.dtype) -> None:
    if reason := unusable_reason(entry.provider, dtype=dtype):  # e.g. symmetric memory, 1 GPU
        pytest.skip(reason)
    report = check_kernel_provider(entry.provider, dtype, plugin=entry.plugin, device="cuda",
                                   seed=41)
    report.raise_for_failures()
    assert report.checked and not report.skipped


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", BACKENDS, ids=lambda b: b.id)
def test_backend_matches_reference(entry: BackendEntry, dtype: torch.dtype) -> None:
    report = check_attention_backend(entry.load(), dtype, device="cuda", seed=42)
    report.raise_for_failures()
    assert report.checked and not report.skipped


def test_certification_suite(tmp_path: Path) -> None:
    """The suite a third party runs: `pytest --pagoda-platform cuda`, every dtype."""
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["pagoda.testing.pytest_plugin"]\n')
    (tmp_path / "test_conformance.py").write_text(
        "from pagoda.testing.suite import *  # noqa: F401,F403\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path),
         "--pagoda-platform", "cuda", "--pagoda-seed", "5"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    # Only collectives may skip, and only on a machine of one GPU.
    one_gpu = torch.cuda.device_count() == 1
    assert all(one_gpu and "is a collective" in line for line in skips), skips


GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def _greedy(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("arch", list(tiny_configs()))
def test_greedy_tokens_match_cpu(arch: str, tmp_path: Path) -> None:
    """Mixed prefill/decode steps, chunked prefill and prefix sharing, float32."""
    path = str(make_checkpoint(tmp_path, tiny_configs()[arch]))
    prompts = _prompts(1, [3, 17, 9, 30, 1, 12]) + [[5] * 21 + p for p in _prompts(2, [4, 9])]
    common = dict(dtype="float32", num_kv_blocks=256, block_size=16, max_num_batched_tokens=32)
    on_gpu = LLM(path, device="cuda", **common)
    assert on_gpu.engine.core.info["attention_backend"] == "triton"
    assert _greedy(on_gpu, prompts) == _greedy(LLM(path, device="cpu", **common), prompts)


def test_long_prompts_take_the_split_kv_path(tmp_path: Path) -> None:
    """Two sequences of 1000+ keys: their decode steps split the keys across programs."""
    from pagoda.kernels.triton import num_kv_splits

    config = tiny_configs()["llama"]
    config.max_position_embeddings = 2048
    path = str(make_checkpoint(tmp_path, config))
    assert num_kv_splits(2, config.num_key_value_heads, 1, 1200, torch.device("cuda")) > 1
    prompts = _prompts(3, [1200, 700])
    common = dict(dtype="float32", num_kv_blocks=256, block_size=16)
    assert (_greedy(LLM(path, device="cuda", **common), prompts)
            == _greedy(LLM(path, device="cpu", **common), prompts))


def test_bfloat16_generation(tmp_path: Path) -> None:
    path = str(make_checkpoint(tmp_path, tiny_configs()["llama"]))
    llm = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=64)
    info = llm.engine.core.info
    assert (info["dtype"], info["attention_backend"]) == ("bfloat16", "triton")
    [tokens] = _greedy(llm, _prompts(4, [20]))
    assert len(tokens) == GREEDY.max_tokens


def test_graphs_and_overlap_match_eager_sync_steps(tmp_path: Path) -> None:
    """Decode graphs (padded batch sizes) with overlapped steps give the tokens of eager,
    synchronous steps: greedy, seeded sampling, and under preemption."""
    path = str(make_checkpoint(tmp_path, tiny_configs()["qwen3"]))
    prompts = _prompts(5, [3, 17, 9, 30, 1])  # five sequences pad to a graph of 8
    common = dict(dtype="float32", block_size=16, num_kv_blocks=256)
    fast = LLM(path, device="cuda", **common)
    info = fast.engine.core.info
    assert info["async_scheduling"] and 8 in info["graph_batch_sizes"]
    eager = LLM(path, device="cuda", enforce_eager=True, async_scheduling=False, **common)
    assert eager.engine.core.info["graph_batch_sizes"] == []
    assert _greedy(fast, prompts) == _greedy(eager, prompts)
    seeded = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=12, ignore_eos=True)

    def sample(llm: LLM) -> list[list[int]]:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], seeded, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs]

    assert sample(fast) == sample(eager)
    tight = LLM(path, device="cuda", dtype="float32", block_size=4, num_kv_blocks=14)
    assert _greedy(tight, prompts) == _greedy(eager, prompts)
    assert tight.engine.core.stats().num_preemptions > 0
    assert tight.engine.core.stats().kv_cache_usage == 0.0


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculative_verify_graphs_match_eager_steps(tmp_path: Path, method: str) -> None:
    """Speculative steps replayed from graphs (verify steps of 1 + k tokens a sequence, the
    draft's forwards) give the tokens of eager steps and HF's, float32."""
    from tests.engine.test_speculative import NEW_TOKENS, PROMPTS, SPECULATIVE
    from tests.engine.tiny_models import hf_greedy

    path = str(make_checkpoint(tmp_path, tiny_configs()["llama"]))
    options = dict(SPECULATIVE) if method == "ngram" else {
        "speculative_method": "draft", "speculative_model": path, "num_speculative_tokens": 3}
    common = dict(dtype="float32", block_size=16, num_kv_blocks=256, **options)
    fast = LLM(path, device="cuda", **common)
    runner = fast.engine.core.executor.worker.runner
    assert [g.query_len for g in runner.graphs] == [1, 4]
    replays = []
    verify = runner.graphs[1]
    run = verify.run
    verify.run = lambda inputs: (replays.append(inputs.input_ids.shape[0]), run(inputs))[1]
    eager = LLM(path, device="cuda", enforce_eager=True, **common)
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)

    def greedy(llm: LLM) -> list[list[int]]:
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
        assert sum(int(o.metrics.get("spec_accepted_tokens", 0)) for o in outs) > 0
        return [o.outputs[0].token_ids for o in outs]

    expected = hf_greedy(Path(path), PROMPTS, NEW_TOKENS)
    assert greedy(fast) == greedy(eager) == expected
    assert len(replays) >= NEW_TOKENS // 4
    if method == "draft":
        assert [g.query_len for g in runner.drafter.graphs] == [1, 4]


def test_launching_a_step_does_not_wait_for_the_gpu(tmp_path: Path) -> None:
    """No device-to-host sync while a step is launched: the host reads sampled ids later."""
    path = str(make_checkpoint(tmp_path, tiny_configs()["llama"]))
    llm = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=64)
    runner = llm.engine.core.executor.worker.runner
    launch, launched = runner.execute_model, []

    def strict_launch(step):
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = launch(step)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        launched.append(len(step.scheduled))
        return out

    runner.execute_model = strict_launch
    params = [SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
              SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=8, ignore_eos=True,
                             logprobs=2)]
    outs = llm.generate([{"prompt_token_ids": p} for p in _prompts(6, [12, 40])], params,
                        use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [8, 8] and len(launched) >= 8


def test_gpu_memory_utilization_caps_the_kv_cache(tmp_path: Path) -> None:
    """The cache fills what the cap leaves after weights, activations and everything else
    in use; many sequences so that the cap, not the longest useful cache, decides."""
    import gc

    path = str(make_checkpoint(tmp_path, tiny_configs()["llama"]))
    gc.collect()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(0)
    # What earlier tests of this process (and anything else) hold counts against the cap.
    in_use = (total - free) / total

    def kv_bytes(utilization: float) -> int:
        llm = LLM(path, device="cuda", dtype="bfloat16", enforce_eager=True,
                  max_num_seqs=1_000_000, gpu_memory_utilization=utilization)
        worker = llm.engine.core.executor.worker
        size = llm.engine.core.info["kv_cache_blocks"] * worker.kv_spec.block_bytes * 2
        del llm, worker
        gc.collect()
        return size

    small, large = kv_bytes(in_use + 0.05), kv_bytes(in_use + 0.1)
    assert 0 < small <= 0.05 * total
    assert large - small > 0.04 * total  # the extra 5% of the GPU all went to the cache


# The fp8 KV cache on the GPU.

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", [b for b in BACKENDS if FP8 in b.load().kv_cache_dtypes()],
                         ids=lambda b: b.id)
def test_backend_matches_reference_with_an_fp8_cache(entry: BackendEntry,
                                                     dtype: torch.dtype) -> None:
    report = check_attention_backend(entry.load(), dtype, device="cuda", seed=43,
                                     kv_cache_dtype=FP8)
    report.raise_for_failures()
    assert report.checked and not report.skipped


def test_fp8_cache_logprobs_close_to_float32_cache(tmp_path: Path) -> None:
    """As tests/engine/test_kv_cache_fp8.py on the CPU: the checkpoint's scales, chunked
    prefill, prefix caching, decode graphs; logprobs within its TOL of the float32 cache's."""
    from tests.engine.test_kv_cache_fp8 import TOL, _checkpoint, _llm, _run

    path = _checkpoint(tmp_path, "k_scale")
    fp8 = _llm(path, "fp8", device="cuda")
    assert fp8.engine.core.info["attention_backend"] == "triton"
    assert fp8.engine.core.info["graph_batch_sizes"]
    want, got = _run(_llm(path, "float32", device="cuda")), _run(fp8)
    for (want_tokens, want_lp), (got_tokens, got_lp) in zip(want, got, strict=True):
        for i, (w, g) in enumerate(zip(want_tokens, got_tokens, strict=True)):
            assert (got_lp[i] - want_lp[i]).abs().max().item() <= TOL
            if g != w:
                break


def test_fp8_cache_graphs_and_overlap_match_eager_sync_steps(tmp_path: Path) -> None:
    """The scales are read from the device in captured decode graphs: the same tokens as
    eager steps (and the checkpoint's scales, not 1.0, are what they read)."""
    from tests.engine.test_kv_cache_fp8 import SCALES, _checkpoint

    path = str(_checkpoint(tmp_path, "k_scale"))
    prompts = _prompts(7, [3, 17, 9, 30, 1])
    common = dict(dtype="float32", block_size=16, num_kv_blocks=256, kv_cache_dtype="fp8")
    fast = LLM(path, device="cuda", **common)
    info = fast.engine.core.info
    assert info["kv_cache_dtype"] == "fp8" and 8 in info["graph_batch_sizes"]
    layers = fast.engine.core.executor.worker.model.model.layers
    assert [m.self_attn.attn.kv_scales.tolist() for m in layers] == [
        pytest.approx(list(s)) for s in SCALES]
    eager = LLM(path, device="cuda", enforce_eager=True, async_scheduling=False, **common)
    assert _greedy(fast, prompts) == _greedy(eager, prompts)


@pytest.mark.parametrize("name", ["gpt-neox", "gpt2"])
def test_transformers_fallback_matches_cpu(name: str, tmp_path: Path) -> None:
    """An architecture Pagoda has no class for, on HF's modeling code with our paged
    attention: decode graphs with overlapped steps, eager synchronous steps and the CPU
    give the same greedy tokens (mixed batches, chunked prefill, shared prefixes)."""
    from tests.engine.test_hf_fallback_parity import CONFIGS

    path = str(make_checkpoint(tmp_path, CONFIGS[name]))
    prompts = _prompts(1, [3, 17, 9, 30, 1, 12]) + [[5] * 21 + p for p in _prompts(2, [4, 9])]
    common = dict(dtype="float32", num_kv_blocks=256, block_size=16, max_num_batched_tokens=32)
    fast = LLM(path, device="cuda", **common)
    info = fast.engine.core.info
    assert info["model_class"] == "TransformersForCausalLM"
    assert info["graph_batch_sizes"] and info["attention_backend"] == "triton"
    eager = LLM(path, device="cuda", enforce_eager=True, async_scheduling=False, **common)
    expected = _greedy(LLM(path, device="cpu", **common), prompts)
    assert _greedy(fast, prompts) == _greedy(eager, prompts) == expected


def test_hopper_launches_a_steps_kernels_dependently(monkeypatch: pytest.MonkeyPatch) -> None:
    """With PAGODA_CUDA_DEPENDENT_LAUNCH=1 (every family; by default all but the Triton
    matmuls), from sm_90 on, the providers
    launch kernels before the one ahead of them ends (each waits for it first): a captured
    chain of such launches, replayed, computes exactly what the same launches compute
    eagerly."""
    from pagoda_cuda import native, triton_ops
    from pagoda_cuda.triton_ops import KERNELS, device_launch

    device = torch.device("cuda", 0)
    capable = torch.cuda.get_device_capability(device) >= (9, 0)
    wanted = native.dependent_launch_wanted()
    assert device_launch(device).dependent_launch == (wanted if capable else frozenset())
    monkeypatch.setenv("PAGODA_CUDA_DEPENDENT_LAUNCH", "1")
    monkeypatch.setattr(triton_ops, "device_launch", device_launch.__wrapped__)
    monkeypatch.setattr(triton_ops, "dependent_families", native.dependent_families.__wrapped__)
    assert bool(triton_ops.device_launch(device).dependent_launch) == capable
    gen = torch.Generator(device).manual_seed(5)
    x = torch.randn(1, 1024, device=device, dtype=torch.bfloat16, generator=gen)
    up = torch.randn(2048, 1024, device=device, dtype=torch.bfloat16, generator=gen) / 32
    down = torch.randn(1024, 1024, device=device, dtype=torch.bfloat16, generator=gen) / 32
    norm = torch.rand(1024, device=device, dtype=torch.bfloat16, generator=gen)

    def chain() -> torch.Tensor:
        h, residual = x, torch.zeros_like(x)
        for _ in range(16):
            h, residual = KERNELS.fused_add_rms_norm(h, residual, norm, 1e-6)
            h = KERNELS.linear(KERNELS.silu_and_mul(KERNELS.linear(h, up)), down)
        return h + residual

    want = chain()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_bf16_on_the_gpu_is_as_close_to_float32_as_hf(arch: str, tmp_path: Path) -> None:
    """Issue 19's numerical trust, with Pagoda on the GPU (HF's runs on the CPU)."""
    from tests.engine.test_bf16_numerics import test_bf16_is_as_close_to_float32_as_hf

    test_bf16_is_as_close_to_float32_as_hf(arch, tmp_path, device="cuda")
