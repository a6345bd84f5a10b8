"""A request's thinking budget: once its output has spent `thinking_budget` tokens without
ending its thinking, the tokens of `thinking_end` are forced, one a step (through the
step's token bitmask, as a grammar's allowed tokens are), and the answer follows."""

from __future__ import annotations


class ThinkingBudget:
    def __init__(self, budget: int, end_token_ids: list[int]):
        self.budget = budget
        self.end = end_token_ids
        self.ended = not end_token_ids
        """The thinking has ended (the output holds the end's tokens)."""

    def observe(self, output_token_ids: list[int]) -> None:
        """After a token was appended to the output."""
        if not self.ended and output_token_ids[-len(self.end):] == self.end:
            self.ended = True

    def forced_token(self, num_output_tokens: int) -> int | None:
        """The token the next one must be: the end's next token once the budget is spent."""
        if self.ended or num_output_tokens < self.budget:
            return None
        return self.end[min(num_output_tokens - self.budget, len(self.end) - 1)]
