#!/bin/sh
# jim: local jobs of grid job ${grid_id}, array job starting at local job ${offset}:
# task T (SGE_TASK_ID, from 1) is local job ${offset} + T - 1.
# Every value below was quoted for the shell when this script was rendered.
# Grid Engine options are given on the qsub command line (which also turns
# off the reading of option lines from this script), not here.
exec ${python} ${wrapper} --sandbox ${sandbox} --outroot ${outroot} --attempt ${attempt} \
    --index-env SGE_TASK_ID --index-offset ${index_offset}
