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
from pagoda.ops import OPS, OpTable  # noqa: E402
from pagoda.platforms import Platform, resolve_platform  # noqa: E402
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
from pagoda_cuda.platform import kv_cache_budget  # noqa: E402
from pagoda_cuda.plugin import TRITON_OPS  # noqa: E402
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
    assert (cuda.name, cuda.device_type, cuda.dispatch_key) == ("cuda", "cuda", "CUDA")
    major, minor = torch.cuda.get_device_capability(0)
    assert cuda.supported_dtypes[0] == (torch.bfloat16 if major >= 8 else torch.float16)
    assert cuda.fp8_dtype == (torch.float8_e4m3fn if (major, minor) >= (8, 9) else None)
    assert cuda.supports_graph_capture and cuda.distributed_backend == "nccl"
    assert cuda.visible_devices_env == "CUDA_VISIBLE_DEVICES"
    assert cuda.preferred_attention_backends[0] == "triton"
    assert cuda.device_count() == torch.cuda.device_count()
    assert torch.cuda.get_device_name(0) in cuda.device_name(0)
    assert cuda.torch_device(1) == torch.device("cuda", 1)
    described = json.loads(json.dumps(cuda.describe()))
    assert described["capability"] == f"{major}.{minor}"
    cuda.set_device(0)
    cuda.synchronize(0)


def test_memory(cuda: Platform) -> None:
    mem = cuda.memory_info(0)
    free, total = torch.cuda.mem_get_info(0)
    assert mem.total == total and 0 < mem.available <= total
    assert cuda.default_kv_cache_bytes(mem) == kv_cache_budget(mem, 0.9)


def test_ops_resolve_to_triton() -> None:
    providers = OpTable("cuda", dtype=torch.bfloat16).providers
    assert providers == {op: "cuda/triton" if op in TRITON_OPS else "core/reference"
                         for op in OPS}


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("entry", PROVIDERS, ids=lambda e: e.id)
def test_provider_matches_reference(entry: ProviderEntry, dtype: torch.dtype) -> None:
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
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
         "--pagoda-platform", "cuda", "--pagoda-seed", "5"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " skipped" not in result.stdout.splitlines()[-1]


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
