"""pagoda-xpu: the Intel GPU (XPU) platform plugin for Pagoda."""

__version__ = "0.1.0"
