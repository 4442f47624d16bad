#!/bin/sh
# jim: grid job 20261122-070000-abcdef01, local jobs from 3 on (PBS flavour pbspro).
# Every value below was quoted for the shell when this script was rendered.
# qsub options are given on the qsub command line, not as #PBS lines here.
# The local job's index is PBS_ARRAY_INDEX + 3: an array task's index,
# or JIM_PBS_TASK (0) for a local job submitted as a job of its own.
JIM_PBS_TASK=''
export JIM_PBS_TASK
exec /usr/bin/python3 /var/lib/jim/u/jobs/20261122-070000-abcdef01/wrapper.py --sandbox /var/lib/jim/u/jobs/20261122-070000-abcdef01/sandbox.tar.gz --outroot /var/lib/jim/u/jobs/20261122-070000-abcdef01/local --attempt 1 \
    --index-env PBS_ARRAY_INDEX --index-offset 3
