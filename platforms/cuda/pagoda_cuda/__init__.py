"""pagoda-cuda: the NVIDIA GPU platform plugin for Pagoda."""

__version__ = "0.1.0"
