"""A tiny Llama GGUF whose linear weights are stored Q4_0/Q4_1 (or any type asked for)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

# hidden 64, 4 heads of 16, 2 KV heads, 2 layers: every linear shape fits the int4 kernel.
VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 64, 64, 96, 2, 4, 2, 16


def tiny_shapes() -> dict[str, tuple[int, ...]]:
    """GGUF name -> PyTorch-order shape of every tensor of the tiny tied Llama."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,)}
    for i in range(LAYERS):
        shapes |= {
            f"blk.{i}.attn_norm.weight": (HIDDEN,), f"blk.{i}.ffn_norm.weight": (HIDDEN,),
            f"blk.{i}.attn_q.weight": (q, HIDDEN), f"blk.{i}.attn_k.weight": (kv, HIDDEN),
            f"blk.{i}.attn_v.weight": (kv, HIDDEN), f"blk.{i}.attn_output.weight": (HIDDEN, q),
            f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN), f"blk.{i}.ffn_up.weight": (FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": (HIDDEN, FFN),
        }
    return shapes


def write_tiny_llama(path: Path, type_of: Callable[[str], T],
                     extra: dict[str, np.ndarray] | None = None) -> Path:
    """Write the tiny tied Llama to `path`; `type_of(gguf_name)` picks each matrix's type;
    `extra` tensors are written as they are (e.g. float32 `rope_freqs.weight`)."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    for name, shape in tiny_shapes().items():
        if len(shape) == 1:
            writer.add_tensor(name, 1 + 0.1 * rng.standard_normal(shape, dtype=np.float32))
            continue
        data = rng.standard_normal(shape, dtype=np.float32) * shape[1] ** -0.5
        qtype = type_of(name)
        raw = None if qtype == T.F32 else qtype
        writer.add_tensor(name, data if raw is None else quantize(data, qtype), raw_dtype=raw)
    for name, data in (extra or {}).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

