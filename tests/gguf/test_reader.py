"""LazyArrayReader against gguf's own GGUFReader: the same metadata values (its arrays
decoded on request), the same tensors, in both byte orders and on the real SmolLM2 file."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFEndian, GGUFReader, GGUFValueType, GGUFWriter

from pagoda.gguf.fields import GGUFMetadata
from pagoda.gguf.reader import LazyArrayField, LazyArrayReader

ARRAYS = {
    "test.strings": ["a", "", "Ġhello", "日本語", "<|im_end|>"] * 40,
    "test.ints": [-3, 0, 7, 2**31 - 1],
    "test.floats": [0.5, -1.25, 3.0e-5],
    "test.bools": [True, False, True],
    "test.nested": [[1, 2], [3, 4, 5]],
}


def _same(path: Path) -> None:
    stock, lazy = GGUFReader(path), LazyArrayReader(path)
    assert list(lazy.fields) == list(stock.fields)
    meta = GGUFMetadata(lazy)
    for key, field in stock.fields.items():
        assert meta.get(key) == GGUFMetadata(stock).get(key), key
        if field.types[:1] == [GGUFValueType.ARRAY] and len(field.data) > 1:
            assert isinstance(lazy.fields[key], LazyArrayField) or key == "test.nested", key
    assert lazy.data_offset == stock.data_offset
    for a, b in zip(stock.tensors, lazy.tensors, strict=True):
        assert (a.name, a.tensor_type, a.data_offset, a.n_bytes) == (
            b.name, b.tensor_type, b.data_offset, b.n_bytes)
        assert np.array_equal(a.data, b.data)


@pytest.mark.parametrize("endian", [GGUFEndian.LITTLE, GGUFEndian.BIG])
def test_written_arrays_read_back_as_gguf_reads_them(tmp_path: Path, endian) -> None:
    path = tmp_path / "t.gguf"
    writer = GGUFWriter(path, "llama", endianess=endian)
    writer.add_uint32("test.scalar", 7)
    writer.add_string("test.name", "tiny")
    for key, values in ARRAYS.items():
        writer.add_array(key, values)
    writer.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    _same(path)
    meta = GGUFMetadata(LazyArrayReader(path))
    assert meta.get("test.strings") == ARRAYS["test.strings"]
    assert meta.get("test.ints") == ARRAYS["test.ints"]
    assert meta.get("test.bools") == ARRAYS["test.bools"]
    assert meta.get("test.nested") == [1, 2, 3, 4, 5]  # gguf flattens arrays of arrays


def test_the_smollm2_file_reads_as_gguf_reads_it(smollm2_path: Path) -> None:
    _same(smollm2_path)
    meta = GGUFMetadata(LazyArrayReader(smollm2_path))
    assert len(meta.get("tokenizer.ggml.tokens")) == 49152


def _resident_kib_at(address: int) -> int:
    """This process's resident KiB of the mapping holding `address` (/proc/self/smaps; other
    maps of the same file, such as a session fixture's, are not counted)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head:  # a mapping's header line: start-end perms offset dev inode path
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and line.startswith("Rss:"):
            return int(line.split()[1])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc")
def test_loading_the_weights_drops_the_files_pages_as_it_goes(smollm2_path: Path) -> None:
    """`GGUFModel.iter_weights` takes each tensor's pages of the file out of the resident set
    once its weight is taken, and every weight, kept to the end (a view of the map, for
    float32 norms, included), still holds what gguf's reader reads."""
    from pagoda.gguf.model import GGUFModel

    model = GGUFModel(smollm2_path)
    tensors = model._reader.tensors
    address = model._reader.data.ctypes.data
    int(model._reader.data[::4096].sum())  # a byte of every page of the file read
    assert _resident_kib_at(address) > 0.9 * smollm2_path.stat().st_size / 1024
    kept = dict(model.iter_weights(keep_quantized=True))
    # What stays: the metadata's pages, and at most one page at each tensor's end (shared
    # with the next tensor, so neither drops it).
    page_kib = mmap.PAGESIZE // 1024
    metadata_pages = -(-model._reader.data_offset // mmap.PAGESIZE)
    assert _resident_kib_at(address) <= (metadata_pages + len(tensors)) * page_kib
    stock = {t.name: t for t in GGUFReader(smollm2_path).tensors}
    norm = kept["model.layers.3.post_attention_layernorm.weight"]
    assert np.array_equal(norm.numpy(), np.asarray(stock["blk.3.ffn_norm.weight"].data))
    head = kept["model.layers.0.self_attn.v_proj.weight"]
    assert head.codes.shape == (192, 576)
