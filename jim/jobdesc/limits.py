"""The limits of a job description, and the checks that hold a description to them.

Every description is bounded before any work is done on it, whatever its
format (README.md "Limits" lists them): its size (:data:`MAX_DESCRIPTION_BYTES`,
and no NUL or byte that is not UTF-8: :func:`check_text`), the length of one
value, the nesting depth, the digits of a number, the number of attributes
and of values (:func:`bounded`, which every parser's attributes pass), the
terms and operators of a ClassAd text (:mod:`jim.jobdesc.classad_text`), the
amounts a description may ask of one local job and what a ``project`` is
made of (read by :class:`jim.jobdesc.model.JobDescription`).  A description
file is read by :func:`read_description_file` only: a regular file, never
more than the limit.  :func:`shown` quotes a value for a message, cut to a
length, so that no message carries an unbounded value.

Over a limit is a :class:`jim.errors.DescriptionError` (GRAM 48) naming the
limit.  Nothing here is worse than linear in the size of the description.
"""

from __future__ import annotations

import os
import re
from typing import Any

from jim.errors import DescriptionError
from jim.safeio import NotRegular, open_regular, read_at_most

#: A value of an attribute: a string, or a nested sequence of values (RSL's ``(FOO bar)``, a JDL list).
#: (The elements are typed Any: a reader's ``list[str | list[str]]`` is a ``list[Value]`` too.)
Value = str | list[Any]

#: Size of a whole description (the RSL text, the JSON or JDL file), in bytes.
MAX_DESCRIPTION_BYTES = 1024 * 1024
#: Characters of one value (one argument, one path, one expression).
MAX_VALUE_CHARS = 128 * 1024
#: Nesting depth: RSL parentheses, JSON arrays and objects, ClassAd brackets.
MAX_DEPTH = 32
#: Characters of one number (JSON number, ClassAd number, an integer attribute).
MAX_NUMBER_DIGITS = 64
#: Attributes of one description.
MAX_ATTRIBUTES = 200
#: Largest ``maxmemory`` / ``minmemory`` (MB: a petabyte) and ``maxcputime`` (minutes: ten years)
#: a description may ask of one local job, and the largest ``hostcount``.
MAX_MEMORY_MB = 1 << 30
MAX_CPU_MINUTES = 10 * 366 * 24 * 60
MAX_HOST_COUNT = 1_000_000
#: The longest ``project`` (an account name of the batch system), and what it is made of: letters,
#: digits and ``. _ -``, not beginning with ``-`` or ``.`` (a batch command would read an option).
MAX_PROJECT_CHARS = 64
PROJECT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
#: Values of one attribute (and elements of one ClassAd list).
MAX_VALUES = 10_000
#: Terms (names, constants, operators, brackets) of one ClassAd text: a JDL file, a requirement.
MAX_CLASSAD_TERMS = 50_000
#: Operators of one ClassAd text (they make the depth of its expression trees).
MAX_CLASSAD_OPERATORS = 1_000

_ESCAPED_BYTE = re.compile(r"(?<!\\)\\udc([89a-f][0-9a-f])")


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a one-line message: escaped like repr, cut after ``limit`` characters."""
    shown_text = _ESCAPED_BYTE.sub(r"\\x\1", repr(text[:limit]))  # (a byte that was not UTF-8: \xff, not \udcff)
    return shown_text + f"... ({len(text)} characters)" if len(text) > limit else shown_text


def _bad_char(text: str) -> str | None:
    """Why ``text`` cannot be a value (a NUL, a byte that is not UTF-8, a lone surrogate), else None."""
    if "\0" in text:
        return f"a NUL character at character {text.index(chr(0)) + 1}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        c = ord(text[e.start])
        what = f"byte 0x{c - 0xDC00:02x} that is not UTF-8" if 0xDC80 <= c <= 0xDCFF else f"lone surrogate U+{c:04X}"
        return f"a {what} at character {e.start + 1}"
    return None


def check_text(text: str, form: str) -> None:
    """Refuse a whole description over :data:`MAX_DESCRIPTION_BYTES`, or with a NUL or undecodable byte."""
    if len(text) > MAX_DESCRIPTION_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"the {form} job description is longer than {MAX_DESCRIPTION_BYTES} bytes")
    why = _bad_char(text)
    if why:
        raise DescriptionError(f"malformed {form} job description: {why}")


def _check_value(name: str, value: str) -> None:
    if len(value) > MAX_VALUE_CHARS:
        raise DescriptionError(f"a value of attribute {shown(name)} is longer than {MAX_VALUE_CHARS} characters")
    why = _bad_char(value)
    if why:
        raise DescriptionError(f"a value of attribute {shown(name)} has {why}")


def _check_values(name: str, values: list[Value], depth: int = 1) -> None:
    if depth > MAX_DEPTH:
        raise DescriptionError(f"attribute {shown(name)} is nested more than {MAX_DEPTH} deep")
    if len(values) > MAX_VALUES:
        raise DescriptionError(f"attribute {shown(name)} has more than {MAX_VALUES} values")
    for v in values:
        if isinstance(v, str):
            _check_value(name, v)
        else:
            _check_values(name, v, depth + 1)


def bounded(attrs: dict[str, list[Value]]) -> dict[str, list[Value]]:
    """``attrs`` after checking the limits on attributes, values and their characters."""
    if len(attrs) > MAX_ATTRIBUTES:
        raise DescriptionError(f"the job description has more than {MAX_ATTRIBUTES} attributes")
    for name, values in attrs.items():
        _check_value("(name)", name)
        _check_values(name, values)
    return attrs


def read_description_file(path: str) -> str:
    """The text of the description file ``path``: a regular file of at most :data:`MAX_DESCRIPTION_BYTES`
    UTF-8 bytes (never a device, a FIFO or a directory; opened without waiting for a writer)."""
    where = shown(path, 200)
    try:
        fd, st = open_regular(path)
    except NotRegular:
        raise DescriptionError(f"job description {where} is not a regular file") from None
    except OSError as e:
        raise DescriptionError(f"cannot read job description {where}: {e.strerror}") from None
    try:
        if st.st_size > MAX_DESCRIPTION_BYTES:
            raise DescriptionError(f"job description {where} is longer than {MAX_DESCRIPTION_BYTES} bytes")
        data = read_at_most(fd, MAX_DESCRIPTION_BYTES + 1)
    except OSError as e:
        raise DescriptionError(f"cannot read job description {where}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"job description {where} is longer than {MAX_DESCRIPTION_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DescriptionError(
            f"job description {where} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None
