"""Summarise a `py-spy record --format raw --threads` profile: per thread, the frames that
take the most samples, by own time and inclusive.

    python ci/pyspy_summary.py PROFILE.txt [ROWS]
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path


def summarise(path: Path, rows: int = 25) -> str:
    own: dict[str, Counter[str]] = defaultdict(Counter)
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    samples: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        thread, frames = (frames[0], frames[1:]) if frames[0].startswith(
            ("thread", "process")) else ("all", frames)
        n = int(count)
        samples[thread] += n
        if frames:
            own[thread][frames[-1]] += n
        for frame in set(frames):
            inclusive[thread][frame] += n
    out = []
    for thread, total in samples.most_common():
        out.append(f"-- {thread}: {total} samples")
        for title, table in (("own", own[thread]), ("inclusive", inclusive[thread])):
            out.append(f"   {title}:")
            out += [f"   {100 * c / total:5.1f}% {frame[:140]}"
                    for frame, c in table.most_common(rows)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
