"""Speculative decoding: proposers of draft tokens (run on the host by the engine core; a
draft model's positions only, its tokens come from the worker), and the verification rule
that keeps the output distribution unchanged."""

from pagoda.spec.draft_slots import DraftModelSlots
from pagoda.spec.ngram import NgramProposer
from pagoda.spec.verify import accepted_tokens, can_speculate

__all__ = ["DraftModelSlots", "NgramProposer", "accepted_tokens", "can_speculate"]
