"""GRAM5 glue: jim as a Globus GRAM5 job manager type, and ``jim gram-install``.

A GRAM5 gatekeeper hands jim one grid job through a job manager type named
``jim`` (see docs/frontends.md). This package ships what plugs jim into a
stock Grid Community Toolkit installation, as data files, and the command
that installs them:

==========================  ===================================================================
file (package data)         installed as
==========================  ===================================================================
``jim.pm``                  ``/usr/share/perl5/Globus/GRAM/JobManager/jim.pm``
                            (``Globus::GRAM::JobManager::jim``: submit/poll/cancel call jim)
``jim.rvf``                 ``/usr/share/globus/globus_gram_job_manager/jim.rvf``
                            (generated: declares every RSL extension, see :mod:`.rvf`)
``globus-jim.conf.in``      ``/etc/globus/globus-jim.conf`` (jim command, timeout, SEG root)
``jobmanager-jim.in``       ``/etc/grid-services/available/jobmanager-jim`` (poll mode)
``jobmanager-jim-seg.in``   ``/etc/grid-services/available/jobmanager-jim-seg`` (push mode)
``jim-seg-job-manager.in``  ``/usr/libexec/jim/jim-seg-job-manager`` (push-mode wrapper)
==========================  ===================================================================

Both services are enabled with the toolkit's own ``globus-gatekeeper-admin``.
:mod:`.install` is ``jim gram-install`` (and ``python -m jim.gram``), and
says why push mode gives each mapped user an event directory of its own;
:mod:`.rvf` writes ``jim.rvf``.  ``RSL_EXTENSIONS`` is computed on each use
(:func:`.rvf.rsl_extensions`): a plug-in installed later adds attributes.
"""

from __future__ import annotations

from jim.gram.install import SERVICES, main
from jim.gram.rvf import render_rvf, rsl_extensions

__all__ = ["RSL_EXTENSIONS", "SERVICES", "main", "render_rvf", "rsl_extensions"]


def __getattr__(name: str) -> dict[str, str]:
    if name == "RSL_EXTENSIONS":  # computed on use: plug-ins may add attributes
        return rsl_extensions()
    raise AttributeError(name)
