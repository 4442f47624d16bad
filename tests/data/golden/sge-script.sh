#!/bin/sh
# jim: local jobs of grid job 20261122-070000-abcdef01, array job starting at local job 3:
# task T (SGE_TASK_ID, from 1) is local job 3 + T - 1.
# Every value below was quoted for the shell when this script was rendered.
# Grid Engine options are given on the qsub command line (which also turns
# off the reading of option lines from this script), not here.
exec /usr/bin/python3 /var/lib/jim/user/jobs/20261122-070000-abcdef01/wrapper.py --sandbox /var/lib/jim/user/jobs/20261122-070000-abcdef01/sandbox.tar.gz --outroot /var/lib/jim/user/jobs/20261122-070000-abcdef01/local --attempt 1 \
    --index-env SGE_TASK_ID --index-offset 2
