"""The outcome of one conformance check: what was checked, skipped, and what failed."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ConformanceReport:
    """Cases of one subject (e.g. "rms_norm by cpu/cpu_native in bfloat16")."""

    subject: str
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "case: reason"
    failures: list[str] = field(default_factory=list)  # "case: what differs"

    @property
    def ok(self) -> bool:
        return not self.failures

    def raise_for_failures(self) -> None:
        """Raise AssertionError listing every failed case (all of them, not the first)."""
        if self.failures:
            total = len(self.checked) + len(self.failures)
            lines = "\n  ".join(self.failures)
            raise AssertionError(
                f"{self.subject}: {len(self.failures)} of {total} cases do not match the "
                f"reference:\n  {lines}"
            )

    def summary(self) -> str:
        return (f"{self.subject}: {len(self.checked)} passed, {len(self.failures)} failed, "
                f"{len(self.skipped)} skipped")
