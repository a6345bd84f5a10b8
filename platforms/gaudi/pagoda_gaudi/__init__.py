"""pagoda-gaudi: the Intel Gaudi (HPU) platform plugin for Pagoda."""

__version__ = "0.1.0"
