"""Quantization methods: the interface and the unquantized default."""

from pagoda.quant.method import QuantMethod
from pagoda.quant.unquantized import UnquantizedMethod

__all__ = ["QuantMethod", "UnquantizedMethod"]
