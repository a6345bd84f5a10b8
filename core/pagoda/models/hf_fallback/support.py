"""Which architectures the transformers fallback can take: a causal LM class that
transformers has and that declares support for its attention interface."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class FallbackUnsupported(ValueError):
    """transformers cannot give the fallback this architecture; the message says why."""


def transformers_causal_lm(architecture: str) -> type:
    """transformers' class for `architecture`, if the fallback can run it.

    It must be one of transformers' causal LMs and set `_supports_attention_backend`
    (its attention goes through the attention interface, so ours can answer it).
    """
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    version = transformers.__version__
    if not hasattr(transformers, "AttentionInterface"):
        raise FallbackUnsupported(f"transformers {version} has no attention interface "
                                  "(AttentionInterface); upgrade transformers")
    cls = getattr(transformers, architecture, None)
    if cls is None:
        raise FallbackUnsupported(f"transformers {version} has no model class {architecture}")
    if architecture not in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()):
        raise FallbackUnsupported(f"{architecture} is not one of transformers' causal LMs")
    if not getattr(cls, "_supports_attention_backend", False):
        raise FallbackUnsupported(
            f"{architecture} does not support the attention interface (transformers "
            f"{version} sets {architecture}._supports_attention_backend = False)")
    return cls


def config_architectures(config: PretrainedConfig) -> list[str]:
    """The config's `architectures`; a config without them: the causal LM transformers
    builds for its `model_type`, if any."""
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures:
        return architectures
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    default = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(config, "model_type", None))
    return [default] if default else []


def fallback_class(config: PretrainedConfig) -> tuple[str, type]:
    """(architecture, transformers' class) for the first of the config's architectures the
    fallback can take; FallbackUnsupported with every reason otherwise."""
    architectures = config_architectures(config)
    if not architectures:
        raise FallbackUnsupported("the config names no architecture")
    reasons = []
    for architecture in architectures:
        try:
            return architecture, transformers_causal_lm(architecture)
        except FallbackUnsupported as exc:
            reasons.append(str(exc))
    raise FallbackUnsupported("; ".join(reasons))
