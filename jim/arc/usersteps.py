"""``jim arc-backend submit|cancel``: the steps A-REX runs as the job's mapped user.

A-REX runs ``submit-jim-job`` and ``cancel-jim-job`` as the account the job
is mapped to, with its own environment (``HOME=/root``, no ``USER``).  Both
steps run jim in this process, as that account:

* the account's ``HOME``, ``USER`` and ``LOGNAME`` come from the password
  database, ``JIM_HOME`` from ``jim_home`` and ``JIM_CONFIG`` from
  ``jim_config`` of ``[custom:jim]`` (:func:`jim.arc.options.user_env`); the
  home is checked as every jim command checks it, and jim's log is set up;
* the grami file is read without following a symbolic link, bounded
  (:data:`jim.arc.grami.MAX_GRAMI_BYTES`);
* A-REX's per-job credential variables (``X509_USER_PROXY`` ...) are taken
  out of the environment first: jim's worker, monitor and local jobs never
  inherit them; only stage 0 of the runtime environments sees them;
* **submit** turns the grami into a jim description (:mod:`jim.arc.grami`:
  ``JIM_*`` variables may name jim's attributes and every installed job
  type's; the ARC queue is passed on when jim's configuration has it), runs
  stage 0 of the job's runtime environments and builds the description from
  the values it left, with the command run by the session directory's
  stage 1/2 script (:mod:`jim.arc.rte`), submits it through jim's normal path
  (:func:`jim.submit.submit`, the same checks as ``jim submit``) and appends
  ``joboption_jobid=<jim id>`` to the grami (never through a symbolic link);
  with the grid identity A-REX wrote in the job's ``local`` control file beside the grami
  (``subject=``, ``voms=``, ``tokenclaim.iss=`` / ``tokenclaim.sub=``: :func:`jim.identity.from_arc_local`),
  never anything of the job's description or environment;
* **cancel** is ``jim cancel`` of the grami's ``joboption_jobid``.

While the site drains (:mod:`jim.drain`) submit refuses every job first, with the reason, before
the grami is read or any runtime environment runs.

A refused description or a failed cancel raises jim's error
(:class:`jim.errors.JimError`, a one-line ``message``), which the dispatcher
(:mod:`jim.arc`) turns into A-REX's failure reason.
"""

from __future__ import annotations

import os
import pwd

from jim import drain
from jim.arc import controldir as cd
from jim.arc import rte
from jim.arc.grami import MAX_GRAMI_BYTES, GramiError, parse, to_description, with_upload_urls
from jim.arc.options import BackendError, Options, user_env
from jim.cancel import cancel as jim_cancel
from jim.config import Config, load_for_step
from jim.credentials import Handed, Handover
from jim.errors import JobNotFound
from jim.handlers import discover
from jim.identity import Identity, from_arc_local
from jim.jobdesc import JIM_ATTRIBUTES
from jim.requirements import parse_resources
from jim.safeio import NotRegular, open_regular, read_at_most
from jim.site import Site
from jim.submit import submit as jim_submit


def submit(opts: Options, grami_path: str) -> str:
    """Submit the grami's job to jim; append ``joboption_jobid``; return the jim id."""
    credentials = _become_user(opts)
    config = load_for_step()
    drain.check(config.site.drain_file)  # (a draining site refuses before the grami is read or any RTE runs)
    text = _read_grami(grami_path)
    known, queues = _known_attributes(), _queue_names(config)
    desc, options = to_description(text, known=known, queues=queues)  # (refused before any RTE runs)
    rtes = rte.plan(options, opts.runtimedirs)
    script = None
    if rtes:
        values = rte.run_stage0(options, rtes, {**os.environ, **credentials})
        final = rte.after_stage0(options, values)
        desc, _ = to_description(text, known=known, queues=queues, options=rte.wrapped_options(final))
        script = rte.write_script(final, rte.runtime_script(final, rtes))
    try:
        with_upload_urls(desc, _output_list(grami_path))
        job_id = jim_submit(Site(config), desc, handover=_handover(grami_path))
    except BaseException:
        if script:
            rte.remove_script(script)
        raise
    fd = os.open(grami_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, f"joboption_jobid={job_id}\n".encode())
    finally:
        os.close(fd)
    return job_id


def cancel(opts: Options, grami_path: str) -> str:
    """``jim cancel`` of the grami's ``joboption_jobid``; the grid state's name."""
    _become_user(opts)
    config = load_for_step()
    job_id = parse(_read_grami(grami_path)).get("joboption_jobid", "")
    if not job_id:
        raise JobNotFound("the grami file names no jim job (joboption_jobid): it was never submitted to jim")
    return jim_cancel(Site(config), job_id).name


def _become_user(opts: Options) -> dict[str, str]:
    """HOME, USER, JIM_HOME (and JIM_CONFIG) of the calling account, from the password database; A-REX's
    credential variables taken out of the environment and returned (for the RTEs' stage 0 alone)."""
    try:
        pw = pwd.getpwuid(os.getuid())
    except KeyError:
        raise BackendError(f"uid {os.getuid()} has no account") from None
    credentials = rte.pop_credentials(os.environ)
    os.environ.update(user_env(opts, pw))
    if not opts.jim_config:
        os.environ.pop("JIM_CONFIG", None)
    return credentials


def _handover(grami_path: str) -> Handover:
    """Who submitted the job and its credential: A-REX's ``proxy`` file beside the grami (the mapped user's),
    which holds the delegated proxy of an X.509 job and the bearer token of a token job."""
    identity = _identity(grami_path)
    try:
        path = cd.sibling(grami_path, "proxy")
    except ValueError:  # (a grami not named as A-REX names it: no proxy beside it)
        return Handover(identity=identity, credentials=[])
    kind = "token" if identity.issuer or identity.token_subject else "x509"
    return Handover(identity=identity, credentials=[Handed(kind, path)] if os.path.lexists(path) else [])


def _identity(grami_path: str) -> Identity:
    """Who submitted the job, as A-REX wrote it in the job's ``local`` file beside the grami."""
    try:
        return from_arc_local(cd.sibling(grami_path, "local"))
    except ValueError:  # (a grami not named as A-REX names it: no local file beside it)
        return Identity(source="arc")


def _read_grami(path: str) -> str:
    try:
        fd, _st = open_regular(path, follow=False)
    except (OSError, NotRegular) as e:
        raise GramiError(f"cannot read the grami file {path}: {e}") from None
    return _read_bounded(fd, "grami file")


def _output_list(grami_path: str) -> str:
    """The job's ``output`` control file beside its grami (the declared outputs' upload URLs), bounded,
    never through a symbolic link; empty when A-REX wrote none."""
    try:
        path = cd.sibling(grami_path, "output")
    except ValueError:  # (a grami not named as A-REX names it: no list beside it)
        return ""
    try:
        fd, _st = open_regular(path, follow=False)
    except FileNotFoundError:
        return ""
    except (OSError, NotRegular) as e:
        raise GramiError(f"cannot read the job's control file {path}: {e}") from None
    return _read_bounded(fd, "job's output list")


def _read_bounded(fd: int, what: str) -> str:
    try:
        data = read_at_most(fd, MAX_GRAMI_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_GRAMI_BYTES:
        raise GramiError(f"the {what} is longer than {MAX_GRAMI_BYTES} bytes")
    return data.decode("utf-8", "surrogateescape")


def _known_attributes() -> set[str]:
    """The names ``JIM_*`` variables may set: jim's attributes and every installed job type's."""
    known = set(JIM_ATTRIBUTES)
    for entry in discover().values():
        if isinstance(entry, type):
            known |= set(getattr(entry, "attributes", ()) or ())
    return known


def _queue_names(config: Config) -> set[str]:
    """The queue names (and labels) of jim's configuration; none without ``[resources]``."""
    if not config.resources:
        return set()
    tree = parse_resources(config.resources)
    return {q.name for q in tree} | {tree.label(q) for q in tree}
