"""pagoda-tpu: the TPU platform plugin for Pagoda, on torch-xla."""

__version__ = "0.1.0"
