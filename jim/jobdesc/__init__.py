"""Job descriptions: GRAM RSL, the GRAM module's JSON, and JDL/ClassAd files.

All three become one :class:`JobDescription`: a mapping from canonical
attribute name to a list of values, as GRAM's job manager hands it to a
job-manager module.  A value is a string or, for nested RSL sequences such as
``environment`` pairs, a list of values.

Attribute names are canonical as GRAM makes them: lower case with
underscores removed, so ``(JIM_Type=montecarlo)``, ``(jimtype=montecarlo)`` and
``JimType = "montecarlo"`` are the same attribute.

Every description is bounded before any work is done on it (the ``MAX_*``
constants of :mod:`jim.jobdesc.limits`, documented in README.md "Limits"): its
size, the length of one value, the nesting depth, the digits of a number, the
number of attributes and of values, and the terms and operators of a ClassAd
text.  Nothing here is worse than linear in the size of the description.

Modules, each depending only on the ones before it:

* :mod:`~jim.jobdesc.limits`: the limits, the checks that hold a description
  to them, reading a description file;
* :mod:`~jim.jobdesc.vocabulary`: the attribute names GRAM, jim and DIRAC's
  JDL may use, and :func:`canonical`;
* :mod:`~jim.jobdesc.model`: :class:`JobDescription`;
* :mod:`~jim.jobdesc.classad_text`: ClassAd text lexed and bounded without the
  ClassAd library;
* :mod:`~jim.jobdesc.rsl`: :func:`parse_rsl`, :func:`to_rsl`;
* :mod:`~jim.jobdesc.gram_json`: :func:`parse_json`, :func:`from_mapping`;
* :mod:`~jim.jobdesc.jdl`: :func:`parse_jdl`, :func:`split_words`;
* :mod:`~jim.jobdesc.shape`: :class:`Shape`, :func:`stated_shape`: what each local job asks for.

The names below are the package's public API.
"""

from jim.jobdesc.gram_json import from_mapping, parse_json
from jim.jobdesc.jdl import JDL_RENAMED, JDL_REQUIREMENTS, parse_jdl, split_words
from jim.jobdesc.limits import (
    MAX_ATTRIBUTES,
    MAX_CLASSAD_OPERATORS,
    MAX_CLASSAD_TERMS,
    MAX_CPU_MINUTES,
    MAX_DEPTH,
    MAX_DESCRIPTION_BYTES,
    MAX_HOST_COUNT,
    MAX_MEMORY_MB,
    MAX_NUMBER_DIGITS,
    MAX_PROJECT_CHARS,
    MAX_VALUE_CHARS,
    MAX_VALUES,
    Value,
    check_text,
    read_description_file,
    shown,
)
from jim.jobdesc.model import JobDescription
from jim.jobdesc.rsl import parse_rsl, to_rsl
from jim.jobdesc.shape import MAX_CORES, MAX_GPUS, Shape, memory_mb, stated_shape
from jim.jobdesc.vocabulary import (
    GRAM_ATTRIBUTES,
    GRAM_INTERNAL_ATTRIBUTES,
    GRAM_JOBTYPES,
    JDL_RECORDED,
    JIM_ATTRIBUTES,
    canonical,
)

__all__ = [
    "GRAM_ATTRIBUTES",
    "GRAM_INTERNAL_ATTRIBUTES",
    "GRAM_JOBTYPES",
    "JDL_RECORDED",
    "JDL_RENAMED",
    "JDL_REQUIREMENTS",
    "JIM_ATTRIBUTES",
    "MAX_ATTRIBUTES",
    "MAX_CORES",
    "MAX_GPUS",
    "MAX_CLASSAD_OPERATORS",
    "MAX_CLASSAD_TERMS",
    "MAX_CPU_MINUTES",
    "MAX_DEPTH",
    "MAX_DESCRIPTION_BYTES",
    "MAX_HOST_COUNT",
    "MAX_MEMORY_MB",
    "MAX_NUMBER_DIGITS",
    "MAX_PROJECT_CHARS",
    "MAX_VALUES",
    "MAX_VALUE_CHARS",
    "JobDescription",
    "Shape",
    "Value",
    "canonical",
    "check_text",
    "from_mapping",
    "memory_mb",
    "parse_jdl",
    "parse_json",
    "parse_rsl",
    "read_description_file",
    "shown",
    "split_words",
    "stated_shape",
    "to_rsl",
]
