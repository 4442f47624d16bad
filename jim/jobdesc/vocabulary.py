"""The names a job description may use: GRAM's, jim's, and DIRAC's recorded ones.

An attribute name is canonical as GRAM makes it (:func:`canonical`): lower case
with underscores removed, so ``(JIM_Type=montecarlo)``, ``(jimtype=montecarlo)``
and ``JimType = "montecarlo"`` are the same attribute.  A description may use
the names of GRAM5's .rvf (:data:`GRAM_ATTRIBUTES`), those GRAM's job manager
adds itself (:data:`GRAM_INTERNAL_ATTRIBUTES`), jim's own
(:data:`JIM_ATTRIBUTES`, declared in jim.rvf), and those the installed job
types declare; a JDL description also DIRAC's attributes that mean nothing at
a site (:data:`JDL_RECORDED`).  :meth:`jim.jobdesc.model.JobDescription.check_known`
refuses any other.
"""

from __future__ import annotations

#: Attributes of GRAM5's own .rvf (globus-gram-job-manager.rvf), canonical.
GRAM_ATTRIBUTES = frozenset(
    [
        "arguments",
        "count",
        "directory",
        "executable",
        "environment",
        "jobtype",
        "maxtime",
        "maxwalltime",
        "maxcputime",
        "grammyjob",
        "stdin",
        "stdout",
        "stderr",
        "queue",
        "project",
        "hostcount",
        "dryrun",
        "maxmemory",
        "minmemory",
        "savestate",
        "twophase",
        "restart",
        "stdoutposition",
        "stderrposition",
        "remoteiourl",
        "filestagein",
        "filestageinshared",
        "filestageout",
        "filecleanup",
        "gasscache",
        "proxytimeout",
        "librarypath",
        "savejobdescription",
        "username",
        "scratchdir",
        "rslsubstitution",
        "expiration",
        "emailaddress",
        "emailonabort",
        "emailonexecution",
        "emailonsuspend",
        "emailontermination",
    ]
)

#: Attributes GRAM's job manager adds before a module sees the description.
GRAM_INTERNAL_ATTRIBUTES = frozenset(
    [
        "uniqid",
        "jobid",
        "cachetag",
        "jobdir",
        "statefile",
        "streamingdisabled",
        "streamingrequested",
        "filestreamout",
        "useforkstarter",
        "emitcondorprocesses",
        "x509userproxy",
        "logfile",
    ]
)

#: jim's own RSL extensions (declared in jim.rvf), with a one-line meaning.
JIM_ATTRIBUTES = {
    "jimtype": "job type: which handler splits the grid job (default generic)",
    "jobname": "a name for people browsing the job",
    "events": "total number of events to produce or process",
    "firstevent": "number of the first event (default 1)",
    "cpuperevent": "CPU seconds one event needs (the user's hint)",
    "eventsperjob": "events per local job wanted by the user (capped by the site)",
    "maxlocaljobs": "at most this many local jobs (capped by the site)",
    "inputfiles": "input files of the job",
    "outputs": "file name patterns the local jobs produce, gathered into the output tar",
    "outputtar": "path where the output tar is written (default: in jim's job directory)",
    "keepfiles": "declared output files (relative to directory), merged from the local jobs under their names",
    "outputmerge": "how keepfiles are merged: concat, first or indexed (default: the job type's)",
    "directoryview": "each local job runs in a private view of directory (true or false; set for ARC jobs)",
    "cores": "cores of each local job",
    "mincores": "the least cores of each local job the job accepts (cores is then the most)",
    "xcount": "cores per host of each local job (GRAM's extension, as OSG's job managers read it)",
    "gpus": "GPUs of each local job",
    "wholenode": "each local job has a node to itself (true or false)",
    "requirements": "requirements on the local queue (name=value pairs or a ClassAd expression)",
    "parameters": "parametric jobs: a count or a list of values",
    "parameterstart": "parametric jobs: first value",
    "parameterstep": "parametric jobs: step between values",
    "parameterfactor": "parametric jobs: factor between values",
}

#: The values of GRAM's ``jobtype``.
GRAM_JOBTYPES = ("single", "multiple", "mpi", "condor")

#: DIRAC JDL attributes that mean nothing at a site: accepted and recorded with the grid job, not acted on.
JDL_RECORDED = {
    "diracjobtype": "DIRAC's JobType (User, ...) when it is not one of GRAM's job types",
    "jobgroup": "DIRAC's job group",
    "priority": "DIRAC's priority of the job among the user's jobs",
    "loglevel": "DIRAC's log level of the job wrapper",
    "owner": "DIRAC's owner name",
    "ownerdn": "DIRAC's owner DN",
    "ownergroup": "DIRAC's owner group",
    "virtualorganization": "DIRAC's VO",
    "submitpools": "DIRAC's submit pools",
    "origin": "DIRAC's submitting client",
    "diracsetup": "DIRAC's setup",
    "outputse": "DIRAC's storage element for output data",
    "outputpath": "DIRAC's path for output data",
    "outputdata": "DIRAC's output data uploaded by its job wrapper",
    "jobconfigargs": "DIRAC's job configuration arguments",
}


def canonical(name: str) -> str:
    """GRAM's canonical attribute name: lower case, no underscores."""
    return name.replace("_", "").lower()
