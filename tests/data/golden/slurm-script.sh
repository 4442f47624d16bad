#!/bin/sh
# jim: local jobs of grid job 20261122-070000-abcdef01, array chunk starting at local job 3.
# Every value below was quoted for the shell when this script was rendered.
# Slurm options are given on the sbatch command line, not here.
exec /usr/bin/python3 /var/lib/jim/user/jobs/20261122-070000-abcdef01/wrapper.py --sandbox /var/lib/jim/user/jobs/20261122-070000-abcdef01/sandbox.tar.gz --outroot /var/lib/jim/user/jobs/20261122-070000-abcdef01/local --attempt 1 \
    --index-env SLURM_ARRAY_TASK_ID --index-offset 3
