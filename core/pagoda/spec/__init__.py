"""Speculative decoding: proposers of draft tokens (run on the host by the engine core),
and the verification rule that keeps the output distribution unchanged."""

from pagoda.spec.ngram import NgramProposer
from pagoda.spec.verify import accepted_tokens, can_speculate

__all__ = ["NgramProposer", "accepted_tokens", "can_speculate"]
