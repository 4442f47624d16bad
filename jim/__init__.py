"""jim: a site-side grid job manager in the style of SAMGrid's JIM job managers.

One grid job in, many local batch jobs out, tracked and managed as one.
Nothing heavy is imported here: ``jim poll`` runs every 10 s per grid job.
"""

__version__ = "0.1.0"
