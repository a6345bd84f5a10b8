"""pagoda-cpu: the CPU platform plugin for Pagoda."""

__version__ = "0.1.0"
