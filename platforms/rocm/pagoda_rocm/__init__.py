"""pagoda-rocm: the AMD GPU (ROCm) platform plugin for Pagoda."""

__version__ = "0.1.0"
