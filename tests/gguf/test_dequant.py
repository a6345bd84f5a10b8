"""Dequantization round trips: float data -> GGUF type -> file -> pagoda -> float32.

gguf's quantizers cover the legacy types; the K-quants are packed here by small
quantizers written from the GGML block layouts, which also say the exact values
a correct dequantizer must return.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.quants import quantize

from pagoda.gguf import SUPPORTED_TENSOR_TYPES
from pagoda.gguf.dequant import dequantize

QK_K = 256
SHAPE = (2, 3, 512)  # PyTorch order; the file stores it reversed

# Upper bounds of RMS(error) / RMS(data) for standard normal data.
REL_RMSE = {
    T.F32: 0.0,
    T.F16: 5e-4,
    T.BF16: 4e-3,
    T.Q8_0: 0.01,
    T.Q6_K: 0.03,
    T.Q5_0: 0.05,
    T.Q5_1: 0.05,
    T.Q5_K: 0.05,
    T.Q4_0: 0.1,
    T.Q4_1: 0.1,
    T.Q4_K: 0.1,
}


def _f16(x: np.ndarray) -> np.ndarray:
    """Round to float16 (how GGML stores block scales) and back to float32."""
    return x.astype(np.float16).astype(np.float32)


def _pack_k_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins in 12 bytes: bytes 0-3 hold sc0-3 (+ top bits of sc4-7),
    4-7 hold m0-3 (+ top bits of m4-7), 8-11 the low nibbles of sc4-7 | m4-7 << 4."""
    return np.concatenate(
        [
            sc[:, :4] | (sc[:, 4:] >> 4) << 6,
            m[:, :4] | (m[:, 4:] >> 4) << 6,
            (sc[:, 4:] & 0xF) | (m[:, 4:] & 0xF) << 4,
        ],
        axis=1,
    ).astype(np.uint8)


def _affine_k(x: np.ndarray, bits: int):
    """Q4_K/Q5_K: 8 sub-blocks of 32, x = d*sc*q - dmin*m with 6-bit sc, m."""
    levels = 2**bits - 1
    sub = x.reshape(-1, 8, 32)
    lo, hi = np.minimum(sub.min(-1), 0), sub.max(-1)
    d, dmin = _f16((hi - lo).max(-1) / levels / 63), _f16((-lo).max(-1) / 63)
    sc = np.clip(np.round((hi - lo) / levels / d[:, None]), 1, 63).astype(np.uint8)
    m = np.clip(np.round(-lo / dmin[:, None]), 0, 63).astype(np.uint8)
    step, offset = (d[:, None] * sc)[..., None], (dmin[:, None] * m)[..., None]
    q = np.clip(np.round((sub + offset) / step), 0, levels).astype(np.uint8)
    head = np.concatenate(
        [
            d.astype(np.float16)[:, None].view(np.uint8),
            dmin.astype(np.float16)[:, None].view(np.uint8),
            _pack_k_scales(sc, m),
        ],
        axis=1,
    )
    return head, q, (step * q - offset).reshape(x.shape)


def _nibbles(q: np.ndarray) -> np.ndarray:
    """qs: chunk c of 32 bytes holds sub-block 2c in low nibbles, 2c+1 in high nibbles."""
    q = q & 0xF
    return (q[:, 0::2] | q[:, 1::2] << 4).reshape(len(q), -1)


def quantize_q4_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    head, q, exact = _affine_k(x, 4)
    return np.concatenate([head, _nibbles(q)], axis=1), exact


def quantize_q5_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    head, q, exact = _affine_k(x, 5)
    qh = sum(((q[:, j] >> 4) & 1) << j for j in range(8)).astype(np.uint8)
    return np.concatenate([head, qh, _nibbles(q)], axis=1), exact


def quantize_q6_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """16 sub-blocks of 16, x = d*sc*(q - 32), int8 sc; ql holds low nibbles, qh 2-bit tops."""
    sub = x.reshape(-1, 16, 16)
    scale = np.abs(sub).max(-1) / 31
    d = _f16(scale.max(-1) / 127)
    sc = np.clip(np.round(scale / d[:, None]), 1, 127).astype(np.int8)
    step = (d[:, None] * sc)[..., None]
    q = (np.clip(np.round(sub / step), -32, 31) + 32).astype(np.uint8)
    exact = (step * (q.astype(np.float32) - 32)).reshape(x.shape)
    q = q.reshape(-1, 2, 4, 32)  # [block, half, quarter, l]: element 128*half + 32*quarter + l
    lo = q & 0xF
    ql = np.stack([lo[:, :, 0] | lo[:, :, 2] << 4, lo[:, :, 1] | lo[:, :, 3] << 4], axis=2)
    qh = sum((q[:, :, k] >> 4) << (2 * k) for k in range(4)).astype(np.uint8)
    block = [
        ql.reshape(len(q), -1),
        qh.reshape(len(q), -1),
        sc.view(np.uint8),
        d.astype(np.float16)[:, None].view(np.uint8),
    ]
    return np.concatenate(block, axis=1), exact


K_QUANTIZERS = {T.Q4_K: quantize_q4_k, T.Q5_K: quantize_q5_k, T.Q6_K: quantize_q6_k}


def test_kquant_block_sizes():
    x = np.random.default_rng(0).standard_normal((4, QK_K), dtype=np.float32)
    assert [K_QUANTIZERS[t](x)[0].shape for t in (T.Q4_K, T.Q5_K, T.Q6_K)] == [
        (4, 144),
        (4, 176),
        (4, 210),
    ]


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory) -> dict[T, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """qtype -> (original, what pagoda read back, exact expected values or None)."""
    rng = np.random.default_rng(1)
    path = tmp_path_factory.mktemp("dequant") / "types.gguf"
    writer = GGUFWriter(path, "llama")
    cases = {}
    for qtype in sorted(SUPPORTED_TENSOR_TYPES, key=lambda t: t.name):
        data = rng.standard_normal(SHAPE, dtype=np.float32)
        if qtype in K_QUANTIZERS:
            packed, exact = K_QUANTIZERS[qtype](data.reshape(-1, QK_K))
            stored, exact = packed.reshape(*SHAPE[:-1], -1), exact.reshape(SHAPE)
        else:
            stored, exact = quantize(data, qtype), None
        raw = None if qtype in (T.F32, T.F16) else qtype
        writer.add_tensor(qtype.name, stored, raw_dtype=raw)
        cases[qtype] = (data, exact)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensors = {t.name: t for t in GGUFReader(path).tensors}
    return {q: (data, dequantize(tensors[q.name]), exact) for q, (data, exact) in cases.items()}


@pytest.mark.parametrize("qtype", sorted(REL_RMSE, key=lambda t: t.name), ids=lambda t: t.name)
def test_round_trip_error(round_trip, qtype):
    original, restored, exact = round_trip[qtype]
    assert restored.dtype == np.float32 and restored.shape == SHAPE
    assert restored.flags.writeable  # a fresh array, not a view of the read-only file
    rel_rmse = np.sqrt(np.mean((restored - original) ** 2) / np.mean(original**2))
    assert rel_rmse <= REL_RMSE[qtype], f"{qtype.name}: relative RMS error {rel_rmse:.4f}"
    if exact is not None:
        np.testing.assert_allclose(restored, exact, rtol=1e-6, atol=1e-7)


def test_every_supported_type_is_covered():
    assert set(REL_RMSE) == set(SUPPORTED_TENSOR_TYPES)
