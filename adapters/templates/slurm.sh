#!/bin/sh
# jim: local jobs of grid job ${grid_id}, array chunk starting at local job ${offset}.
# Every value below was quoted for the shell when this script was rendered.
# Slurm options are given on the sbatch command line, not here.
exec ${python} ${wrapper} --sandbox ${sandbox} --outroot ${outroot} --attempt ${attempt} \
    --index-env SLURM_ARRAY_TASK_ID --index-offset ${offset}
