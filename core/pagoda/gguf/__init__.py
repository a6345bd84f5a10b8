"""GGUF checkpoints as HF configs, HF-named float weights and transformers tokenizers.

model = GGUFModel("SmolLM2-135M-Instruct.Q4_1.gguf")
model.config                # transformers PretrainedConfig
model.iter_weights()        # (HF name, float32 tensor), streamed
model.load_tokenizer()      # with the file's chat template
"""

try:
    import gguf  # noqa: F401
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        "reading GGUF files needs the gguf package: pip install 'pagoda[gguf]'"
    ) from exc

from pagoda.gguf.config import ARCHITECTURES
from pagoda.gguf.dequant import SUPPORTED_TENSOR_TYPES
from pagoda.gguf.model import GGUFModel

__all__ = ["ARCHITECTURES", "SUPPORTED_TENSOR_TYPES", "GGUFModel"]
