"""How each local job's resource shape is asked of Grid Engine and PBS: the qsub arguments.

The worker hands every chunk its :class:`jim.adapters.model.Limits` (cores,
memory of the whole job, GPUs, whole node; see :mod:`jim.jobdesc.shape`);
this module says how Grid Engine and the PBS family spell them, so that the
two adapters only call it.  A shape the site's system cannot be asked for
(more than one core with no parallel environment named, a whole node through
Slurm's PBS wrappers...) is a :class:`SubmitError` that is not transient: the
local jobs fail with a reason that names the option a site admin can set.

* **Grid Engine** counts a job's slots through a *parallel environment*
  (``-pe <pe> N``; the site's, with ``allocation_rule $pe_slots`` so that
  they are on one host) and its memory limits and consumables **per slot**:
  the whole job's memory is divided by the cores, rounded up, for each
  memory resource the site names (``h_data``, as the stock GRAM sge module,
  unless the site says ``h_vmem``, ``mem_free``...).  GPUs and a whole node
  are complexes the site defines and names (``-l gpu=2``, ``-l exclusive=true``).
* **PBS Pro** takes one chunk: ``-l select=1:ncpus=N:mem=<MB>mb:ngpus=G``,
  and ``-l place=excl`` for a whole node.  **Torque** (and Slurm's PBS
  wrappers) take ``-l nodes=1:ppn=N:gpus=G`` with the job's ``-l mem``;
  Torque asks for a whole node with ``-n`` (node-exclusive), the wrappers
  cannot.  A job of one core, no GPU, on a shared node is asked for as
  before the shape existed: only ``-l mem``.  The wrappers' qsub keeps only
  its last ``-l``: there every resource (wall time too) goes in one list.
"""

from __future__ import annotations

import re

from jim.adapters.model import Limits
from jim.errors import ConfigError, SubmitError

#: What a Grid Engine complex or parallel environment name may be (sge_types(5) object_name, less
#: what could break a ``-l name=value,...`` list): a letter or ``_``, then letters, digits, ``_ . -``.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def check_name(option: str, value: str) -> None:
    """:class:`ConfigError` unless ``value`` (of ``[batch] option``) can name a complex or a
    parallel environment ("" is "none")."""
    if value and not _NAME.fullmatch(value):
        raise ConfigError(
            f"[batch] {option} must be a Grid Engine name (letters, digits, _ . -; at most 64), got {value!r}"
        )


def per_slot_mb(memory_mb: int, slots: int) -> int:
    """A whole job's memory spread over its slots, rounded up (Grid Engine counts memory per slot)."""
    return -(-memory_mb // max(1, slots))


def sge_shape_args(
    limits: Limits, *, pe: str, memory_resources: tuple[str, ...], gpu_resource: str, exclusive_resource: str
) -> list[str]:
    """qsub arguments of the shape in ``limits`` for Grid Engine (see the module docstring)."""
    argv: list[str] = []
    if limits.cores > 1:
        if not pe:
            raise SubmitError(
                f"a local job of {limits.cores} cores needs a Grid Engine parallel environment, and this "
                "site names none ([batch] parallel_environment, one with allocation_rule $pe_slots)"
            )
        argv += ["-pe", pe, str(limits.cores)]
    if limits.memory_mb:
        per_slot = per_slot_mb(limits.memory_mb, limits.cores)
        for name in memory_resources:
            argv += ["-l", f"{name}={per_slot}M"]
    if limits.gpus:
        if not gpu_resource:
            raise SubmitError(
                f"a local job of {limits.gpus} GPU(s) needs the Grid Engine complex that counts GPUs, "
                "and this site names none ([batch] gpu_resource)"
            )
        argv += ["-l", f"{gpu_resource}={limits.gpus}"]
    if limits.whole_node:
        if not exclusive_resource:
            raise SubmitError(
                "a local job that needs a whole node needs a Grid Engine exclusive complex (relop EXCL), "
                "and this site names none ([batch] exclusive_resource)"
            )
        argv += ["-l", f"{exclusive_resource}=true"]
    return argv


def pbs_shape_args(limits: Limits, *, flavour: str) -> tuple[list[str], list[str]]:
    """The ``-l`` resources and other qsub flags (``-n``) of the shape and memory in ``limits`` for
    the PBS flavour ``flavour`` (``pbspro``: a select statement; ``torque``, ``slurm``: nodes and ppn)."""
    plain = limits.cores <= 1 and not limits.gpus and not limits.whole_node
    mem = [f"mem={limits.memory_mb}mb"] if limits.memory_mb else []
    if plain:
        return mem, []
    if flavour == "pbspro":
        chunk = ":".join([f"select=1:ncpus={limits.cores}", *mem, *([f"ngpus={limits.gpus}"] if limits.gpus else [])])
        return [chunk, *(["place=excl"] if limits.whole_node else [])], []
    if limits.whole_node and flavour != "torque":
        raise SubmitError(
            "Slurm's PBS wrappers cannot ask for a whole node (their qsub has no exclusive option): "
            "use the slurm adapter"
        )
    nodes = f"nodes=1:ppn={limits.cores}" + (f":gpus={limits.gpus}" if limits.gpus else "")
    return [nodes, *mem], ["-n"] if limits.whole_node else []


def pbs_resource_args(job_wide: list[str], limits: Limits, *, flavour: str, one_list: bool) -> list[str]:
    """qsub arguments of the job-wide resources ``job_wide`` (``walltime=...``) and of the shape in
    ``limits``: one ``-l`` each, or all in one comma list when ``one_list`` (a qsub that keeps only
    its last ``-l``, as Slurm's PBS wrappers)."""
    shape, flags = pbs_shape_args(limits, flavour=flavour)
    resources = [*job_wide, *shape]
    if one_list:
        return [*(["-l", ",".join(resources)] if resources else []), *flags]
    return [*(arg for r in resources for arg in ("-l", r)), *flags]
