"""gguf's `GGUFReader` with each metadata array kept as one view of its bytes.

The stock reader splits every array into one numpy view per element as it opens a file: a
vocabulary of 49k tokens and 49k merges made opening SmolLM2's 92 MiB GGUF take 4 s, all of
it in arrays the engine does not read (the tokenizer comes converted from its own cache, or
from transformers, which parses the file itself). Here an array's extent is found by
walking its string lengths (or by multiplying, for numbers), and its values are decoded
only when asked for (`array_values`). Everything else is gguf's own parsing.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, ReaderField

_SCALARS = GGUFReader.gguf_scalar_to_np
"""GGUF scalar type -> numpy dtype (gguf's own table)."""


class LazyArrayReader(GGUFReader):
    """A GGUFReader whose ARRAY fields are [item type, length, bytes] with types [ARRAY,
    item type]: read them with `array_values`, not `ReaderField.contents`. Arrays of
    arrays are gguf's, element by element, all the way down."""

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


def is_lazy_array(field: ReaderField) -> bool:
    """Whether `field` (of a `LazyArrayReader`) is an array kept as its bytes (arrays of
    arrays are parsed by gguf, element by element)."""
    return len(field.types) == 2 and field.types[0] == GGUFValueType.ARRAY \
        and field.types[1] != GGUFValueType.ARRAY


def array_values(field: ReaderField) -> list[Any]:
    """The values of an ARRAY field of `LazyArrayReader` (strings decoded as UTF-8)."""
    item, length, body = field.types[-1], field.parts[-2], field.parts[-1]
    order = _order(length)
    if item != GGUFValueType.STRING:
        return np.frombuffer(body, np.dtype(_SCALARS[item]).newbyteorder(order)).tolist()
    raw = body.tobytes()
    length_of = struct.Struct(order + "Q").unpack_from
    values, offs = [], 0
    for _ in range(int(length[0])):
        n = length_of(raw, offs)[0]
        values.append(raw[offs + 8 : offs + 8 + n].decode("utf-8"))
        offs += 8 + n
    return values


def _order(part: np.ndarray) -> str:
    """The byte order ("<" or ">") of a multi-byte part the reader read."""
    order = part.dtype.byteorder
    return {"=": "<" if sys.byteorder == "little" else ">"}.get(order, order)
