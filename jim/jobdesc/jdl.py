"""JDL / ClassAd job descriptions (:func:`parse_jdl`), DIRAC's vocabulary read as jim's.

A JDL file is read in the new ClassAd syntax (``[ A = 1; B = "x"; ]``) or the
old one (one definition per line, or several joined by ``;``) by the ClassAd
bindings (:func:`jim.classads.classad_module`), once the text is bounded
(:func:`jim.jobdesc.classad_text.classad_tokens`).  Every value but
``Requirements`` and ``Splitter`` must be a constant.  DIRAC's names become jim's
(:data:`JDL_RENAMED`, ``Splitter``, :data:`JDL_REQUIREMENTS`, DIRAC's resource
attributes :data:`JDL_SHAPE` read by :func:`dirac_shape`; docs/jdl.md has the
whole table), and a string of ``Arguments`` or ``Environment`` is split
into words as a shell would, without expansions (:func:`split_words`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from jim.classads import classad_module
from jim.errors import DescriptionError, GramError, InvalidAttribute
from jim.jobdesc.classad_text import CLASSAD_TOKEN, classad_tokens
from jim.jobdesc.limits import MAX_ATTRIBUTES, Value, bounded, check_text, shown
from jim.jobdesc.model import JobDescription
from jim.jobdesc.shape import MAX_CORES, memory_mb
from jim.jobdesc.vocabulary import GRAM_JOBTYPES, canonical

#: DIRAC JDL names and the jim attribute each becomes (docs/jdl.md has the whole table).
JDL_RENAMED = {
    "stdinput": "stdin",
    "stdoutput": "stdout",
    "stderror": "stderr",
    "inputsandbox": "inputfiles",
    "outputsandbox": "outputs",
}

#: DIRAC's resource attributes and the jim attribute each gives (:func:`dirac_shape` reads them).
JDL_SHAPE = {
    "numberofprocessors": "cores",
    "maxnumberofprocessors": "cores",
    "minnumberofprocessors": "mincores",
    "maxram": "maxmemory",
}
#: DIRAC's three processor counts: together they say one thing (``NumberOfProcessors`` wins).
_JDL_PROCESSORS = ("numberofprocessors", "minnumberofprocessors", "maxnumberofprocessors")
#: A whole number of processors; a memory that is a bare number (DIRAC's GB).
_JDL_WHOLE = re.compile(r"[0-9]{1,6}\Z")
_JDL_BARE = re.compile(r"\s*[0-9]{1,9}(\.[0-9]{1,6})?\s*\Z")

#: DIRAC JDL names (RFC #7) that become requirements on the local queue.
JDL_REQUIREMENTS = ("site", "bannedsite", "platform", "cputime", "tags")

#: A site, platform or tag name that may become a requirement (no quote, comma, blank or '=').
_JDL_REQUIREMENT_WORD = re.compile(r"[A-Za-z0-9_.+:/-]{1,256}\Z")
#: The queue parameter each DIRAC requirement names.
_JDL_REQUIREMENT_NAMES = {"site": "Site", "platform": "Platform", "tags": "Tag"}
#: A CPU time in seconds.
_JDL_SECONDS = re.compile(r"[0-9]{1,18}(\.[0-9]{0,6})?\Z")


def parse_jdl(text: str, extra_known: Iterable[str] | None = None) -> JobDescription:
    """Parse a JDL / ClassAd job description with HTCondor's classad module.

    Strings and numbers become one value; ClassAd lists become lists of values;
    ``Arguments`` given as one string is split like a shell would (no
    expansion); ``Environment`` may be a list of ``NAME=value`` strings or one
    ``"A=1 B=2"`` string; ``Requirements`` (an expression) is kept as its
    ClassAd text.

    DIRAC's vocabulary is mapped to jim's (docs/jdl.md): ``StdInput``, ``StdOutput``,
    ``StdError``, ``InputSandbox``, ``OutputSandbox`` (:data:`JDL_RENAMED`),
    ``Splitter = Parametric`` (the parametric job type), the dotted names of
    parameter sequences (``Parameters.A = {...}``, which the ClassAd grammar
    lacks, are read as quoted names), RFC #7's ``Site``, ``BannedSite``,
    ``Platform``, ``CPUTime`` and ``Tags`` (added to the requirements) and
    DIRAC's attributes with no meaning at a site (:data:`~jim.jobdesc.vocabulary.JDL_RECORDED`:
    accepted and recorded).

    The text is bounded (:func:`classad_tokens`) before the library sees it.
    Every other value must be a constant: literals, lists and operators on them,
    no reference to an attribute and no function call; one that evaluates to
    ``undefined`` or ``error`` is refused.  With ``extra_known`` (the names the
    installed job types declare), a name that neither GRAM, jim nor a job type
    knows is refused before anything is evaluated.
    """
    check_text(text, "JDL")
    ad = _read_classad(text, classad_tokens(text, "the JDL job description"))
    keys = list(ad.keys())
    if len(keys) > MAX_ATTRIBUTES:
        raise DescriptionError(f"the job description has more than {MAX_ATTRIBUTES} attributes")
    targets = _targets(keys)
    if extra_known is not None:
        # (a dotted name, DIRAC's Parameters.A, is known when its first part is: the job type checks the rest)
        names = {t.partition(".")[0] for t in targets}
        JobDescription(dict.fromkeys(names, []), source_format="jdl").check_known(extra_known)
    return JobDescription(bounded(_attributes(ad, keys)), source_format="jdl", source_text=text)


def _read_classad(text: str, tokens: list[tuple[str, str]]) -> Any:
    """The ClassAd of a bounded JDL ``text`` (its ``tokens``), read by the bindings in the new syntax
    or the old; refused unless it holds exactly the attributes the text defines."""
    classad = classad_module()
    quoted = _quote_dotted_names(text)
    try:
        ad = classad.parseOne(quoted)
    except Exception as e:  # the bindings raise several types
        raise DescriptionError(f"JDL does not parse as a ClassAd: {e}") from None
    defined = _definitions(tokens)
    if len(ad) < defined and tokens[0] != ("open", "["):
        try:  # old-style lines joined by ';' on one line: the library reads the first only
            ad = classad.parseOne(f"[{quoted}\n]")
        except Exception:  # (not new-style either: counted below)
            pass
    if len(ad) == 0 and text.strip():
        raise DescriptionError("JDL does not parse as a ClassAd (no attributes found)")
    if len(ad) != defined:
        raise DescriptionError(
            f"JDL does not parse as one ClassAd: {defined} attribute definitions, {len(ad)} read "
            "(an attribute given twice?)"
        )
    return ad


def _targets(keys: list[str]) -> dict[str, str]:
    """jim's name -> the JDL name that gives it; two JDL names that give the same one are refused
    (but for the requirements, which every DIRAC requirement adds to)."""
    targets: dict[str, str] = {}
    for key in keys:
        name = _jdl_name(key)
        target = "requirements" if name in JDL_REQUIREMENTS else JDL_SHAPE.get(name) or JDL_RENAMED.get(name, name)
        target = "jimtype" if name == "splitter" else target
        earlier = targets.get(target)
        together = earlier is not None and name in _JDL_PROCESSORS and _jdl_name(earlier) in _JDL_PROCESSORS
        if earlier is not None and target != "requirements" and not together:
            raise DescriptionError(f"JDL attributes {shown(earlier)} and {shown(key)} both give {target}")
        targets.setdefault(target, key)
    return targets


def _attributes(ad: Any, keys: list[str]) -> dict[str, list[Value]]:
    """The description's attributes, under jim's names, from the JDL attributes ``keys`` of ``ad``:
    ``Requirements`` as its ClassAd text, then DIRAC's requirements; every other value evaluated."""
    attrs: dict[str, list[Value]] = {}
    wanted: list[Value] = []
    dirac: dict[str, tuple[str, list[Value]]] = {}
    for key in keys:
        name = _jdl_name(key)
        expr = str(ad.lookup(key))  # (bounded above: the unparser recurses through the tree)
        if name == "requirements":
            attrs.setdefault(name, []).insert(0, expr)
        elif name == "splitter":
            attrs["jimtype"] = [_jdl_splitter(expr)]
        else:
            values = _evaluated(ad, key, expr)
            if name in JDL_REQUIREMENTS:
                wanted.append(_jdl_requirement(key, name, values))
            if name in JDL_SHAPE or name == "tags":
                dirac[name] = (key, values)
            elif name not in JDL_REQUIREMENTS:
                attrs[_target(name, values)] = values
    if wanted:
        attrs.setdefault("requirements", []).extend(wanted)
    for name, values in dirac_shape(dirac).items():
        attrs.setdefault(name, values)  # (a jim attribute given as well wins: gpus beside a GPU tag)
    return attrs


def dirac_shape(found: dict[str, tuple[str, list[Value]]]) -> dict[str, list[Value]]:
    """jim's ``cores``, ``mincores``, ``maxmemory`` and ``gpus`` from DIRAC's attributes (``found``:
    canonical name -> (JDL name, values)), by DIRAC's rules (its ``JDL.py``, ``JobScheduling``,
    ``JobAgent``): ``NumberOfProcessors`` is exact and the minimum and maximum are then not read;
    ``MinNumberOfProcessors`` alone is what the job gets; ``MaxNumberOfProcessors`` alone is a range
    from 1; ``MaxRAM`` is in GB when it has no unit; a ``GPU`` tag asks for one GPU."""
    out: dict[str, list[Value]] = {}
    exact = _processors(found, "numberofprocessors")
    least = _processors(found, "minnumberofprocessors")
    most = _processors(found, "maxnumberofprocessors")
    if exact is not None:
        out["cores"] = [str(exact)]
    elif least is not None and most is not None:
        if most < least:
            raise InvalidAttribute(
                f"JDL MaxNumberOfProcessors ({most}) must not be below MinNumberOfProcessors ({least})"
            )
        out["cores"] = [str(most)]
        if least < most:
            out["mincores"] = [str(least)]
    elif least is not None or most is not None:
        out["cores"] = [str(least or most)]
        if most is not None and most > 1:
            out["mincores"] = ["1"]
    if "maxram" in found:
        out["maxmemory"] = [str(_dirac_memory(*found["maxram"]))]
    tags = [str(v).strip().lower() for v in found.get("tags", ("", []))[1]]
    if "gpu" in tags:
        out["gpus"] = ["1"]
    return out


def _processors(found: dict[str, tuple[str, list[Value]]], name: str) -> int | None:
    """DIRAC processor count ``name``: one whole number from 1 to jim's most cores; None when not given."""
    if name not in found:
        return None
    key, values = found[name]
    word = str(values[0]).strip() if len(values) == 1 else ""
    if not _JDL_WHOLE.match(word) or not 1 <= int(word) <= MAX_CORES:
        raise InvalidAttribute(
            f"JDL {key} must be a whole number of processors from 1 to {MAX_CORES}, "
            f"got {shown(' '.join(map(str, values)))}"
        )
    return int(word)


def _dirac_memory(key: str, values: list[Value]) -> int:
    """DIRAC's ``MaxRAM`` in MB: a bare number is GB (DIRAC's unit), else a memory with its unit."""
    word = str(values[0]).strip() if len(values) == 1 else ""
    if not _JDL_BARE.match(word):
        return memory_mb(word, f"JDL {key}")
    try:
        return memory_mb(f"{word}G", f"JDL {key}")
    except InvalidAttribute:
        raise InvalidAttribute(
            f"JDL {key} is in GB (DIRAC's unit): above 0 and at most jim's largest memory, got {shown(word)}",
            gram_error=GramError.INVALID_MAX_MEMORY,
        ) from None


def _evaluated(ad: Any, key: str, expr: str) -> list[Value]:
    """The values of JDL attribute ``key`` (its ClassAd text ``expr``): a constant, evaluated."""
    _jdl_constant(key, expr)
    try:
        value = ad.eval(key)
    except Exception as e:
        raise DescriptionError(f"JDL attribute {shown(key)} does not evaluate: {shown(expr)}", cause=e) from None
    if isinstance(value, classad_module().Value):  # undefined or error (an IntEnum: never a number here)
        raise DescriptionError(f"JDL attribute {shown(key)} is {value.name.lower()}: {shown(expr)}")
    return _jdl_values(key, value)


def _target(name: str, values: list[Value]) -> str:
    """jim's name for JDL attribute ``name`` with ``values``: DIRAC's renamed, and a ``JobType``
    that is not one of GRAM's job types recorded as ``diracjobtype``."""
    if name == "jobtype" and not (len(values) == 1 and str(values[0]).lower() in GRAM_JOBTYPES):
        return "diracjobtype"
    return JDL_RENAMED.get(name, name)


def _definitions(tokens: list[tuple[str, str]]) -> int:
    """How many attributes a JDL text defines: its ``=`` at the top level (inside its outer ``[ ]``, if any)."""
    top = 1 if tokens and tokens[0] == ("open", "[") else 0
    depth = count = 0
    for kind, _tok in tokens:
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
        elif kind == "assign" and depth == top:
            count += 1
    return count


def _jdl_name(key: str) -> str:
    """A JDL attribute's canonical name; a dotted one keeps its sequence name as written (``parameters.A``)."""
    base, dot, rest = key.partition(".")
    return canonical(base) + dot + rest


def _quote_dotted_names(text: str) -> str:
    """``text`` with each dotted attribute name being defined (``Parameters.A =``, DIRAC's named parameter
    sequences) written as a quoted ClassAd name (``'Parameters.A' =``); ``text`` is already bounded."""
    toks = []
    for m in CLASSAD_TOKEN.finditer(text):
        if m.lastgroup == "unclosed":
            break
        if m.lastgroup != "blank":
            toks.append(m)
    out: list[str] = []
    done = 0
    for i in range(len(toks) - 3):
        a, dot, b, eq = toks[i : i + 4]
        if (
            a.lastgroup == "name"
            and dot.group() == "."
            and b.lastgroup == "name"
            and eq.lastgroup == "assign"
            and a.end() == dot.start()
            and dot.end() == b.start()
            and a.start() >= done
        ):
            out.append(text[done : a.start()])
            out.append(f"'{a.group()}.{b.group()}'")
            done = b.end()
    out.append(text[done:])
    return "".join(out)


def _jdl_splitter(expr: str) -> str:
    """The job type of DIRAC's ``Splitter`` (``Parametric``, bare or quoted): ``parametric``."""
    toks = classad_tokens(expr, "JDL attribute Splitter")
    if len(toks) == 1 and toks[0][0] in ("name", "string"):
        word = toks[0][1].strip('"')
        if word.lower() == "parametric":
            return "parametric"
    raise InvalidAttribute(f"JDL Splitter must be Parametric (the only splitter jim has), got {shown(expr)}")


def _jdl_requirement(key: str, name: str, values: list[Value]) -> str:
    """DIRAC's ``Site``, ``BannedSite``, ``Platform``, ``CPUTime`` or ``Tags`` as one requirement on the queue."""
    words = [str(v).strip() for v in values]
    if not words:
        raise InvalidAttribute(f"JDL {key} has no value")
    if name == "cputime":
        if len(words) != 1 or not _JDL_SECONDS.match(words[0]):
            raise InvalidAttribute(f"JDL {key} must be a number of seconds, got {shown(' '.join(words))}")
        return f"MaxCPUTime={words[0].split('.')[0] if words[0].endswith('.') else words[0]}"
    for w in words:
        if not _JDL_REQUIREMENT_WORD.match(w):
            raise InvalidAttribute(f"JDL {key} values must be names of letters, digits and _.+:/- only, got {shown(w)}")
    if name == "bannedsite":
        return " && ".join(f'Site =!= "{w}"' for w in words)
    return f"{_JDL_REQUIREMENT_NAMES[name]}={','.join(words)}"


_CONSTANT_NAMES = frozenset(["true", "false"])


def _jdl_constant(key: str, expr: str) -> None:
    """Refuse a JDL value that is not a constant (a reference, a function call, a record, undefined, error)."""
    for kind, tok in classad_tokens(expr, f"JDL attribute {shown(key)}"):
        low = tok.lower()
        if kind == "name" and low in ("undefined", "error"):
            raise DescriptionError(f"JDL attribute {shown(key)} is {low}: {shown(expr)}")
        if (kind == "name" and low not in _CONSTANT_NAMES) or kind == "qname":
            raise DescriptionError(
                f"JDL attribute {shown(key)} must be a constant, not a reference to {shown(tok)}: {shown(expr)}"
            )
        if kind == "open" and tok == "[":
            raise DescriptionError(f"JDL attribute {shown(key)} must be a constant, not a ClassAd record")


def _jdl_values(key: str, value: Any) -> list[Value]:
    """The values of JDL attribute ``key`` from its evaluated ``value``: a boolean as ``yes``/``no``,
    a number as its text, a string (:func:`_string_values`), a list (:func:`_list_values`)."""
    if isinstance(value, bool):
        return ["yes" if value else "no"]
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, str):
        return _string_values(canonical(key), value)
    if isinstance(value, list):
        return _list_values(key, value)
    raise DescriptionError(f"JDL attribute {shown(key)}: unsupported value {shown(str(value))}")


def _string_values(name: str, value: str) -> list[Value]:
    """A JDL string: ``Arguments`` split into words as a shell would, ``Environment`` into its
    ``NAME=value`` words as pairs (a word without ``=`` left out), any other one value."""
    if name not in ("arguments", "environment"):
        return [value]
    try:
        words = split_words(value)
    except ValueError as e:
        raise DescriptionError(f"JDL {'Arguments' if name == 'arguments' else 'Environment'}: {e}") from None
    if name == "arguments":
        return [*words]
    return [list(item.split("=", 1)) for item in words if "=" in item]


def _list_values(key: str, value: list[Any]) -> list[Value]:
    """A JDL list: ``Environment`` entries as pairs, any other list flattened into values (no list in it)."""
    if canonical(key) == "environment":
        return [_environment_pair(str(item)) for item in value]
    values: list[Value] = []
    for v in value:
        if isinstance(v, list):
            raise DescriptionError(f"JDL attribute {shown(key)}: a list inside a list")
        values.extend(_jdl_values(key, v) if not isinstance(v, str) else [v])
    return values


def _environment_pair(entry: str) -> Value:
    """One ``NAME=value`` entry of a JDL ``Environment`` list as a (NAME value) pair."""
    if "=" not in entry:
        raise DescriptionError(f"JDL Environment entry {shown(entry)} is not NAME=value")
    return list(entry.split("=", 1))


#: A shell word's pieces: plain run, 'single', "double" (\" and \\ escaped), \x, blanks, a lone quote or \.
_WORD_PIECE = re.compile(
    r"""([^ \t\r\n'"\\]+)|'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"|\\(.)|([ \t\r\n]+)|(['"])|(\\)""", re.S
)
_DQ_ESCAPE = re.compile(r'\\([\\"])')


def split_words(text: str) -> list[str]:
    """``text`` split into words like a POSIX shell would, without expansions (as ``shlex.split``),
    in time linear in its length.  Raises ValueError for an unclosed quote or a trailing backslash."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    for m in _WORD_PIECE.finditer(text):
        plain, single, double, escaped, blank, lone, backslash = m.groups()
        if blank is not None:
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            continue
        if lone is not None:  # (like shlex: a backslash that ends an open "... escapes nothing)
            rest = text[m.end() :]
            escaping = lone == '"' and (len(rest) - len(rest.rstrip("\\"))) % 2 == 1
            raise ValueError("No escaped character" if escaping else "No closing quotation")
        if backslash is not None:
            raise ValueError("No escaped character")
        in_word = True
        if plain is not None:
            word.append(plain)
        elif single is not None:
            word.append(single)
        elif double is not None:
            word.append(_DQ_ESCAPE.sub(r"\1", double) if "\\" in double else double)
        else:
            word.append(escaped)
    if in_word:
        words.append("".join(word))
    return words
