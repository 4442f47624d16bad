"""Sets of local job indices as ranges, ``0-3,7,9-10``: the job-array syntax of Slurm,
Torque and Grid Engine lists, how the intent journal names the local jobs of a chunk, and
how a person names some local jobs of a grid job (``ID.3-7,12``: :func:`parse_selection`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from jim.errors import GramError, JimError

_RANGE = re.compile(r"(\d+)(?:-(\d+))?(?::\d+)?")

#: The longest range :func:`parse_array_spec` unfolds (a hostile line cannot make millions of ints).
MAX_RANGE = 1_000_000
#: Local jobs one selection may name (a range is unfolded before the grid job is read).
MAX_SELECTED = 1_000_000


def array_spec(indices: Iterable[int]) -> str:
    """``0-3,7,9-10`` from indices (duplicates and order do not matter; at least one index)."""
    ts = sorted(set(indices))
    parts = []
    start = prev = ts[0]
    for t in [*ts[1:], None]:
        if t is not None and t == prev + 1:
            prev = t
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if t is not None:
            start = prev = t
    return ",".join(parts)


def parse_array_spec(spec: str) -> list[int] | None:
    """Indices from ``0-3,7,9-10`` (what :func:`array_spec` writes; Slurm's ``:step`` and ``%limit``
    suffixes are allowed and the step ignored), else None for anything else."""
    out: list[int] = []
    for part in spec.split("%")[0].split(","):
        m = _RANGE.fullmatch(part)
        if not m:
            return None
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        if last - first > MAX_RANGE:
            return None
        out.extend(range(first, last + 1))
    return out


def runs(indices: Iterable[int], *, span: int | None = None, gaps: bool = False) -> list[list[int]]:
    """Sorted indices in groups: runs of consecutive indices, or with ``gaps=True`` any indices;
    a group spans at most ``span`` indices (last - first < span)."""
    out: list[list[int]] = []
    for i in sorted(set(indices)):
        if out and (gaps or i == out[-1][-1] + 1) and (span is None or i - out[-1][0] < span):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def parse_selection(text: str) -> tuple[str, list[int]]:
    """``ID.k`` or ``ID.3-7,12`` (``jim kill``, ``jim resubmit``) -> (grid job id, sorted local job
    indices, each once); :class:`JimError` (46) otherwise.  The id is the caller's to check."""
    job_id, dot, spec = text.partition(".")
    indices = parse_array_spec(spec) if dot and spec and "%" not in spec and ":" not in spec else None
    if indices is None or len(indices) > MAX_SELECTED:
        raise JimError(
            f"{text[:200]!r} does not name local jobs: write ID.k, ID.3-7 or ID.3-7,12",
            gram_error=GramError.BAD_ARGUMENTS,
        )
    return job_id, sorted(set(indices))
