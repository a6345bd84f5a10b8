"""gguf's `GGUFReader` with each metadata array kept as one view of its bytes.

The stock reader splits every array into one numpy view per element as it opens a file: a
vocabulary of 49k tokens and 49k merges made opening SmolLM2's 92 MiB GGUF take 4 s, all of
it in arrays the engine does not read (the tokenizer comes converted from its own cache, or
from transformers, which parses the file itself). Here an array's extent is found by
walking its string lengths (or by multiplying, for numbers), and its values are decoded
only when asked for (`LazyArrayField.contents`, gguf's own way to read a field). Everything
else is gguf's own parsing.
"""

from __future__ import annotations

import mmap
import struct
import sys
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, ReaderField, ReaderTensor

_SCALARS = GGUFReader.gguf_scalar_to_np
"""GGUF scalar type -> numpy dtype (gguf's own table)."""


class LazyArrayField(ReaderField):
    """An ARRAY field kept as parts [item type, length, bytes] with types [ARRAY, item
    type]; `contents` decodes its values (strings as UTF-8) when asked."""

    __slots__ = ()

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        item, length, body = self.types[-1], self.parts[-2], self.parts[-1]
        order = _order(length)
        if item != GGUFValueType.STRING:
            values = np.frombuffer(body, np.dtype(_SCALARS[item]).newbyteorder(order)).tolist()
            return values[index_or_slice]
        raw = body.tobytes()
        length_of = struct.Struct(order + "Q").unpack_from
        strings, offs = [], 0
        for _ in range(int(length[0])):
            n = length_of(raw, offs)[0]
            strings.append(raw[offs + 8 : offs + 8 + n].decode("utf-8"))
            offs += 8 + n
        return strings[index_or_slice]


class LazyArrayReader(GGUFReader):
    """A GGUFReader whose ARRAY fields are `LazyArrayField`s. Arrays of arrays are gguf's,
    element by element, all the way down."""

    _nested = False
    """Inside an array of arrays (gguf's parse, which calls back here for its elements)."""

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list, list, list]:
        if self._nested or GGUFValueType(raw_type) != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        item_type = self._get(orig_offs, np.uint32)
        length = self._get(orig_offs + 4, np.uint64)
        item = GGUFValueType(item_type[0])
        start = end = orig_offs + 12
        if item == GGUFValueType.STRING:
            length_of = struct.Struct(_order(length) + "Q").unpack_from
            for _ in range(int(length[0])):
                end += 8 + length_of(self.data, end)[0]
        elif item in _SCALARS:
            end += int(length[0]) * np.dtype(_SCALARS[item]).itemsize
        else:  # arrays of arrays
            self._nested = True
            try:
                return super()._get_field_parts(orig_offs, raw_type)
            finally:
                self._nested = False
        body = self._get(start, np.uint8, end - start)
        return end - orig_offs, [item_type, length, body], [2], [GGUFValueType.ARRAY, item]

    def _push_field(self, field: ReaderField, skip_sum: bool = False) -> int:
        # Types [ARRAY, item] are an array kept whole above; gguf's arrays of arrays have
        # more (or, empty, fewer).
        if len(field.types) == 2 and field.types[0] == GGUFValueType.ARRAY != field.types[1]:
            field = LazyArrayField(*field)
        return super()._push_field(field, skip_sum)

    def drop_pages(self, tensor: ReaderTensor) -> None:
        """Take the whole pages of `tensor`'s bytes out of this process's resident set: the
        map is of the file, read-only, so a page touched again is read back from it."""
        mapping = getattr(self.data, "_mmap", None)  # numpy.memmap's mmap.mmap
        if mapping is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = -(-int(tensor.data_offset) // mmap.PAGESIZE) * mmap.PAGESIZE
        end = (int(tensor.data_offset) + int(tensor.n_bytes)) // mmap.PAGESIZE * mmap.PAGESIZE
        if end > start:
            mapping.madvise(mmap.MADV_DONTNEED, start, end - start)


def _order(part: np.ndarray) -> str:
    """The byte order ("<" or ">") of a multi-byte part the reader read."""
    order = part.dtype.byteorder
    return {"=": "<" if sys.byteorder == "little" else ">"}.get(order, order)
