"""Event-based splitting (inclusive first/last event per local job)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EventSlice:
    """Events ``first`` .. ``last`` inclusive; ``count`` = last - first + 1."""

    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def split_events(total: int, per_job: int, first: int = 1, balanced: bool = False) -> list[EventSlice]:
    """Cut ``total`` events starting at ``first`` into jobs of at most ``per_job`` events.

    ``balanced=False`` gives full jobs plus a shorter tail (WMCore's EventBased);
    ``balanced=True`` gives the same number of jobs with sizes differing by at most one.
    """
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise ValueError(f"total events must be a positive integer, got {total!r}")
    if isinstance(per_job, bool) or not isinstance(per_job, int) or per_job <= 0:
        raise ValueError(f"events per job must be a positive integer, got {per_job!r}")
    if isinstance(first, bool) or not isinstance(first, int) or first < 0:
        raise ValueError(f"first event must be a non-negative integer, got {first!r}")
    n = -(-total // per_job)
    slices = []
    start = first
    if balanced:
        base, extra = divmod(total, n)
        for k in range(n):
            size = base + (1 if k < extra else 0)
            slices.append(EventSlice(start, start + size - 1))
            start += size
    else:
        remaining = total
        while remaining > 0:
            size = min(per_job, remaining)
            slices.append(EventSlice(start, start + size - 1))
            start += size
            remaining -= size
    return slices
