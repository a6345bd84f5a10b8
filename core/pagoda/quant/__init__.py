"""Quantization: the QuantMethod interface, the methods core ships, canonical quantized
weights (`pagoda.quant.tensors`) and parameter layouts (`pagoda.quant.layout`)."""

from pagoda.quant.checkpoint import CheckpointTensor
from pagoda.quant.method import QuantMethod
from pagoda.quant.tensors import Fp8Weight, GroupQuantWeight, Int8Weight
from pagoda.quant.unquantized import UnquantizedMethod

__all__ = ["CheckpointTensor", "Fp8Weight", "GroupQuantWeight", "Int8Weight", "QuantMethod",
           "UnquantizedMethod"]
