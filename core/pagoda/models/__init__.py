"""Model architectures, their layers, and loading weights into them."""

from pagoda.models.loader import load_hf_config, load_model, resolve_model_class
from pagoda.models.weights import iterate_safetensors, load_checkpoint_weights

__all__ = [
    "iterate_safetensors",
    "load_checkpoint_weights",
    "load_hf_config",
    "load_model",
    "resolve_model_class",
]
