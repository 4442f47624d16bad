"""A grid job's record: the typed model of ``db/<id>.xml`` and its rules.

:class:`GridJob` (the root ``<gridjob>``) and :class:`LocalJob` (one
``<localjob>``) are views of the XML elements with the rules that change
them: local states never go back and every terminal one records its evidence
(:meth:`LocalJob.set_state`), a new attempt keeps the old one
(:meth:`LocalJob.new_attempt`), the grid state is aggregated from the local
ones under the site's failure policy (:meth:`GridJob.recompute`).
:func:`new_record` builds a fresh one.  Storing records (files, locks, the
index) is :mod:`jim.db`'s; :mod:`jim.record.migrate` says which schema versions
are read and brings an older record up to date.

A local job's own attributes are its current (last) attempt's: its state,
tag, batch id, times, exit code and evidence.  Each earlier attempt is one
``<attempt>`` element (:meth:`LocalJob.new_attempt`), with why the next one
was made (``retryReason``) and who asked (``retryBy``, for a resubmission).

A grid job record::

    <?xml-stylesheet type="text/xsl" href="jim.xsl"?>
    <gridjob schemaVersion="2" id="..." jobtype="montecarlo" state="ACTIVE" ...>
      <description format="rsl"><source>...</source><attribute name="...">...</attribute></description>
      <plan localJobs="12" binding="site-recommended-cpu" ...><explanation>...</explanation></plan>
      <history><grid state="PENDING" at="..."/>...</history>
      <localjobs>
        <localjob index="0" tag="<id>.0" MasterJobID="<id>" SplitID="0" HerdState="Splitted"
                  state="RUNNING" batchId="..." submitted="..." started="...">
          <slice firstEvent="1" lastEvent="250" events="250"/>
          <history><state name="QUEUED" at="..."/>...</history>
          <progress><phase name="d0gstar" done="117" total="250" at="..."/></progress>
        </localjob>
        <localjob index="2" ... state="DONE" ...>
          ...
          <usage source="wrapper" cpuUser="1.013" cpuSystem="0.021" maxRssKb="215040" wall="1.094"
                 cores="1" node="cn3"/>          (what the attempt used: jim.record.usage)
        </localjob>
        <localjob index="1" tag="<id>.1.2" attempt="2" state="RUNNING" batchId="..." node="cn2" ...>
          ...
          <attempts>
            <attempt n="1" tag="<id>.1" batchId="..." node="cn1" state="FAILED" evidence="batch"
                     cause="NODE_FAIL" reason="..." retryReason="node failure (NODE_FAIL)" retryAt="...">
              <usage source="sacct" wall="3605" cores="1" node="cn1"/>
            </attempt>
          </attempts>
        </localjob>
      </localjobs>
      <outputs tar="..." at="..."/>
    </gridjob>
"""

from jim.record.elements import (
    PARSER,
    SCHEMA_VERSION,
    STYLESHEET,
    STYLESHEET_PI,
    child,
    required,
    stylesheet_pi,
)
from jim.record.gridjob import NO_FAILURES, GridJob, failure_reason
from jim.record.localjob import LocalJob
from jim.record.new import NewJob, new_record
from jim.record.usage import Source, Totals, Usage

__all__ = [
    "NO_FAILURES",
    "PARSER",
    "SCHEMA_VERSION",
    "STYLESHEET",
    "STYLESHEET_PI",
    "GridJob",
    "LocalJob",
    "NewJob",
    "Source",
    "Totals",
    "Usage",
    "child",
    "failure_reason",
    "new_record",
    "required",
    "stylesheet_pi",
]
