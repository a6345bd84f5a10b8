"""pagoda-tpu on XLA's CPU device (PJRT_DEVICE=CPU): the platform, the conformance suite of
core's kit, static shapes that compile once per bucket, and the compilation cache.

Nothing here runs on a TPU; the Pallas backend is checked only to decline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_xla", reason="torch_xla is not installed (bash ci/tpu.sh runs these)")
pytestmark = pytest.mark.usefixtures("xla_cpu")

import torch  # noqa: E402

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.attention import AttentionConfig  # noqa: E402
from pagoda.attention.selector import select_attention_backend  # noqa: E402
from pagoda.platforms import resolve_platform  # noqa: E402
from pagoda_tpu.compile_cache import compilations  # noqa: E402
from pagoda_tpu.pallas import PallasAttentionBackend  # noqa: E402
from pagoda_tpu.platform import HOST_KV_CACHE_CAP, TpuPlatform  # noqa: E402
from tests.engine.tiny_models import make_checkpoint, tiny_configs  # noqa: E402


def test_platform_is_xlas_cpu_device() -> None:
    platform = resolve_platform("tpu")
    assert isinstance(platform, TpuPlatform) and platform.on_cpu
    assert platform.torch_device(0).type == "xla" == platform.device_type
    assert platform.default_dtype == torch.float32  # bfloat16 first on a TPU
    assert platform.supported_dtypes == (torch.float32, torch.bfloat16)
    assert platform.device_count() == 1
    assert platform.device_name() == "XLA CPU:0 (for testing, not a TPU)"
    memory = platform.memory_info()
    assert 0 < memory.available <= memory.total
    assert 0 < platform.default_kv_cache_bytes(memory) <= HOST_KV_CACHE_CAP
    described = platform.describe()
    assert (described["pjrt_device"], described["distributed_backend"]) == ("CPU", "xla")
    assert described["supports_graph_capture"] is False


def test_attention_falls_back_from_pallas_to_xla() -> None:
    config = AttentionConfig(8, 2, 128, torch.bfloat16, torch.bfloat16, 16)
    reasons = PallasAttentionBackend.validate(config)
    assert "needs a real TPU (PJRT device is CPU)" in reasons
    assert select_attention_backend(resolve_platform("tpu"), config).name == "xla"


SUITE = "from pagoda.testing.suite import *  # noqa: F401,F403\n"


def test_conformance_suite_certifies_tpu_on_xla_cpu(tmp_path: Path) -> None:
    """Core's kit, as a vendor runs it: every op provider and attention backend of `tpu`
    against the references on XLA's CPU device, and the tiny model's greedy tokens."""
    (tmp_path / "test_pagoda_conformance.py").write_text(SUITE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pagoda.testing.pytest_plugin", "-p",
         "no:cacheprovider", "-v", "-rs", "--pagoda-platform", "tpu", str(tmp_path)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = result.stdout
    assert result.returncode == 0, out[-6000:] + result.stderr[-3000:]
    for dtype in ("float32", "bfloat16"):
        assert f"test_attention_backend_matches_reference[tpu/xla-{dtype}] PASSED" in out
        assert f"test_attention_backend_matches_reference[tpu/pallas-{dtype}] SKIPPED" in out
    assert "needs a real TPU (PJRT device is CPU)" in out  # why pallas was skipped
    assert "platform 'tpu' does not support torch.float16" in out


GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def _generate(llm: LLM, prompts: list[list[int]], params: SamplingParams = GREEDY) -> None:
    llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


def test_steps_inside_one_bucket_compile_once(llama: Path) -> None:
    llm = LLM(str(llama), device="tpu", dtype="float32", num_kv_blocks=64)
    # XLA's CPU device cannot load programs back: no persistent cache there.
    assert resolve_platform("tpu").describe()["compile_cache"] is None
    _generate(llm, [[5] * 4])  # every step is (16 tokens, 8 sequences, 8 blocks)
    warm = compilations()
    # Other lengths, batch sizes and positions, all inside that bucket: nothing new.
    _generate(llm, [[7] * 9, [8] * 2, [3] * 4])
    _generate(llm, [[9, 10]])
    assert compilations() == warm
    _generate(llm, [[6] * 20])  # a 20-token prefill is the 32-token bucket: one program
    assert compilations() == warm + 1


CACHE_PROBE = """
import sys
from pathlib import Path
import torch, torch_xla
from pagoda_tpu.compile_cache import compilations, initialize_compile_cache
assert initialize_compile_cache(Path(sys.argv[1]))
x = torch.arange(6.0).to(torch_xla.device()) * 3
torch_xla.sync()
assert x.cpu().tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]
assert compilations() == 1
assert not initialize_compile_cache(Path(sys.argv[1]) / "late")  # too late: left as is
"""


def test_compiled_programs_go_to_the_cache_folder(tmp_path: Path) -> None:
    """The persistent cache is torch-xla's; on a TPU later processes load these programs
    (not checked here: XLA's CPU device cannot deserialize them)."""
    folder = tmp_path / "xla-cache"
    result = subprocess.run([sys.executable, "-c", CACHE_PROBE, str(folder)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list(folder.iterdir())) == 1
    assert not (folder / "late").exists()
