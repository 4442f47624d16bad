"""Job requirements → local queue: DIRAC RFC #7 matching, plus ClassAd expressions.

The site describes its queues in the ``[resources]`` table of its configuration; a job states
its requirements in its description.  ``jim submit`` and ``jim plan`` call
:func:`requirements_of_description` and :func:`choose_queue`; ``jim advertise`` calls
:func:`parse_resources`; job-type handlers receive the chosen :class:`Queue`.

Modules, each depending only on the ones before it:

* :mod:`~jim.requirements.resources`: the site's queues, parsed from ``[resources]``;
* :mod:`~jim.requirements.expressions`: ClassAd expressions and records (imported lazily);
* :mod:`~jim.requirements.matching`: a job's requirements against the queues, and why none fits;
* :mod:`~jim.requirements.choice`: the description's requirements, the queue choice, its cache.

The rules (configuration, matching, selection, cache) are in ``docs/requirements.md``.
"""

from jim.requirements.choice import QueueCache, choose_queue, requirements_of_description
from jim.requirements.expressions import InvalidRequirement
from jim.requirements.matching import NoEligibleQueue
from jim.requirements.resources import Queue, ResourceConfigError, parse_resources

__all__ = [
    "InvalidRequirement",
    "NoEligibleQueue",
    "Queue",
    "QueueCache",
    "ResourceConfigError",
    "choose_queue",
    "parse_resources",
    "requirements_of_description",
]
