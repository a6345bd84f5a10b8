"""Quantization methods: the interface, the unquantized default, checkpoint tensor forms."""

from pagoda.quant.checkpoint import CheckpointTensor, Int4Weight
from pagoda.quant.method import QuantMethod
from pagoda.quant.unquantized import UnquantizedMethod

__all__ = ["CheckpointTensor", "Int4Weight", "QuantMethod", "UnquantizedMethod"]
