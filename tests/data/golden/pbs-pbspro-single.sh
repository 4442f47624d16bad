#!/bin/sh
# jim: grid job 20261122-070000-abcdef01, local jobs from 9 on (PBS flavour pbspro).
# Every value below was quoted for the shell when this script was rendered.
# qsub options are given on the qsub command line, not as #PBS lines here.
# The local job's index is JIM_PBS_TASK + 9: an array task's index,
# or JIM_PBS_TASK (0) for a local job submitted as a job of its own.
JIM_PBS_TASK=0
export JIM_PBS_TASK
exec /usr/bin/python3 /var/lib/jim/u/jobs/20261122-070000-abcdef01/wrapper.py --sandbox /var/lib/jim/u/jobs/20261122-070000-abcdef01/sandbox.tar.gz --outroot /var/lib/jim/u/jobs/20261122-070000-abcdef01/local --attempt 1 \
    --index-env JIM_PBS_TASK --index-offset 9
