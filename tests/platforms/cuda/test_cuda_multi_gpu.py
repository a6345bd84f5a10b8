"""pagoda-cuda on several NVIDIA GPUs over NCCL (`bash ci/gpu.sh multigpu`): tensor and
pipeline parallelism give HF transformers' greedy tokens in float32 on tiny models (TP=2,
PP=2, TP=2 x PP=2 and TP=4), and bf16 runs of the 8B model's layer shapes give one GPU's
first tokens at TP=2 and TP=4. Each case skips where fewer GPUs are visible than it needs
(the same layouts run on the CPU over gloo in tests/distributed/test_model_parallel.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from pagoda import LLM, SamplingParams
from tests.distributed.test_model_parallel import _prompts  # the CPU layouts' prompts
from tests.engine.tiny_models import (
    VOCAB,
    hf_greedy,
    make_checkpoint,
    save_tokenizer,
    tiny_configs,
)

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda_cuda.platform import TP_GRAPHS_ENV  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs two or more NVIDIA GPUs (ci/gpu.sh multigpu)"),
]

LAYOUTS = {"tp2": (2, 1), "pp2": (1, 2), "tp2-pp2": (2, 2), "tp4": (4, 1)}
NEW_TOKENS = 10
CONFIG_8B = Path(__file__).resolve().parents[3] / "ci" / "models" / "llama3-8b" / "config.json"


def _needs(devices: int) -> None:
    if torch.cuda.device_count() < devices:
        pytest.skip(f"needs {devices} GPUs, {torch.cuda.device_count()} visible")


def _generate(llm: LLM, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_parallel_layouts_generate_hf_greedy_tokens(layout: str, arch: str,
                                                    tmp_path: Path) -> None:
    """float32, mixed prefill chunks and decodes (16 tokens a step), prefix sharing."""
    tp, pp = LAYOUTS[layout]
    _needs(tp * pp)
    path = make_checkpoint(tmp_path, tiny_configs()[arch])
    prompts = _prompts(1, [3, 17, 9, 30, 1, 12], VOCAB)
    prompts += [[5] * 21 + p for p in _prompts(2, [4, 9], VOCAB)]
    llm = LLM(str(path), device="cuda", dtype="float32", tensor_parallel_size=tp,
              pipeline_parallel_size=pp, max_num_batched_tokens=16, num_kv_blocks=128,
              block_size=16)
    try:
        info = llm.engine.core.info
        assert (info["tensor_parallel_size"], info["pipeline_parallel_size"]) == (tp, pp)
        # Graphs hold NCCL's all-reduce where PAGODA_CUDA_TP_GRAPHS=1 (ci/gpu.sh multigpu).
        graphs = pp == 1 and (tp == 1 or os.environ.get(TP_GRAPHS_ENV) == "1")
        assert bool(info["graph_batch_sizes"]) == graphs
        assert _generate(llm, prompts, NEW_TOKENS) == hf_greedy(path, prompts, NEW_TOKENS)
        assert llm.engine.core.stats().kv_cache_usage == 0.0
    finally:
        llm.engine.shutdown()


@pytest.fixture(scope="module")
def llama8b_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8B model's shapes (hidden 4096, 32/8 heads, MLP 14336, vocabulary 128256) in 4 of
    its 32 layers, HF's random initialisation saved in bfloat16: real weights every layout
    splits the same way (dummy weights are drawn per shard)."""
    config = json.loads(CONFIG_8B.read_text()) | {"num_hidden_layers": 4}
    path = tmp_path_factory.mktemp("llama8b-4l")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(LlamaConfig(**config), dtype=torch.bfloat16)
    model.save_pretrained(path)
    save_tokenizer(path)
    return path


@pytest.mark.parametrize("tp", [2, 4])
def test_8b_shapes_in_bf16_give_one_gpus_first_tokens(llama8b_layers: Path, tp: int) -> None:
    _needs(tp)
    prompts = _prompts(3, [7, 40, 128, 300], 128256)
    common = dict(device="cuda", dtype="bfloat16", gpu_memory_utilization=0.3,
                  max_num_seqs=8)
    one = LLM(str(llama8b_layers), **common)
    expected = _generate(one, prompts, 4)
    one.engine.shutdown()
    del one
    llm = LLM(str(llama8b_layers), tensor_parallel_size=tp, **common)
    try:
        got = _generate(llm, prompts, 4)
    finally:
        llm.engine.shutdown()
    # bf16 sums split over ranks round differently: the first token of each prompt must
    # agree, and at least 3 of 4 prompts all four tokens.
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert sum(g == e for g, e in zip(got, expected)) >= 3, (got, expected)
