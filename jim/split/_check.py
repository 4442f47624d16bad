"""Parameter checks shared by the splitters.

Every check raises :class:`ValueError` with a one-line message that names the
parameter and shows the offending value; the caller turns it into a GRAM error.
``bool`` is rejected wherever an integer is expected (``True`` is an ``int`` in
Python, but never a sensible event count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeGuard, TypeVar

T = TypeVar("T")


def is_int(value: object) -> TypeGuard[int]:
    """True for a real integer (``bool`` excluded)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """True for an ``int`` or ``float`` that is finite (``bool`` excluded)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value == value and value not in (float("inf"), float("-inf"))


def positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an integer > 0, else raise ValueError."""
    if not is_int(value) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def non_negative_int(name: str, value: object) -> int:
    """Return ``value`` if it is an integer >= 0, else raise ValueError."""
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def optional_positive_int(name: str, value: object) -> int | None:
    """``None`` (no limit) or an integer > 0."""
    return None if value is None else positive_int(name, value)


def total_limit(name: str, value: object) -> int | None:
    """A task-wide total: ``None`` or ``0`` is no limit (WMCore's default), else an integer > 0."""
    if is_int(value) and value == 0:
        return None
    return optional_positive_int(name, value)


def positive_number(name: str, value: object) -> float:
    """Return ``value`` if it is a finite int/float > 0, else raise ValueError."""
    if not is_number(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


def non_negative_number(name: str, value: object) -> float:
    """Return ``value`` if it is a finite int/float >= 0, else raise ValueError."""
    if not is_number(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return value


def file_name(value: object) -> str:
    """A file name: a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"file name must be a non-empty string, got {value!r}")
    return value


def unique_names(names: Iterable[str]) -> None:
    """Raise ValueError if a file name occurs twice (a file must land in one slice)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"input file {name!r} is listed more than once")
        seen.add(name)


MAX_LOCATIONS = 64
"""At most this many locations (storage elements, sites) for one input file."""

MAX_LOCATION_LENGTH = 255


def location_set(owner: str, value: object) -> frozenset[str]:
    """A file's location set from one name or a collection of names; empty: no location known.

    Each name is a non-empty printable string of at most :data:`MAX_LOCATION_LENGTH`
    characters; at most :data:`MAX_LOCATIONS` names.
    """
    items: list[object]
    if isinstance(value, str):
        items = [value] if value else []
    elif isinstance(value, (set, frozenset, list, tuple)):
        if len(value) > MAX_LOCATIONS:
            raise ValueError(f"location of {owner} names more than {MAX_LOCATIONS} places")
        items = list(value)
    else:
        raise ValueError(f"location of {owner} must be a name or a set of names, got {type(value).__name__}")
    for item in items:
        if not isinstance(item, str) or not item or len(item) > MAX_LOCATION_LENGTH or not item.isprintable():
            shown = repr(item)[:80]
            raise ValueError(
                f"location of {owner} must be printable names of 1 to {MAX_LOCATION_LENGTH} characters, got {shown}"
            )
    return frozenset(items)  # type: ignore[arg-type]  # (checked above: every item is a str)


def group_by_location(items: Iterable[T], location: Callable[[T], frozenset[str]]) -> list[T]:
    """``items`` reordered so that equal location sets are adjacent (WMCore's job groups).

    Groups come in the order of their first item; inside a group the input order is kept.
    """
    groups: dict[frozenset[str], list[T]] = {}
    for item in items:
        groups.setdefault(location(item), []).append(item)
    return [item for group in groups.values() for item in group]


def flag(name: str, value: object) -> bool:
    """Return ``value`` if it is a ``bool``, else raise ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def job_count(n: int, max_jobs: int | None) -> None:
    """Raise ValueError if ``n`` slices exceed ``max_jobs`` (``None``: no limit)."""
    if max_jobs is not None and n > max_jobs:
        raise ValueError(f"the split needs {n} jobs, more than the limit of {max_jobs}")


def no_string(name: str, value: object) -> None:
    """Reject a bare string where a sequence of items is expected."""
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be a sequence, not a single string: {value!r}")
