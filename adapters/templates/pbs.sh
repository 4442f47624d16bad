#!/bin/sh
# jim: grid job ${grid_id}, local jobs from ${offset} on (PBS flavour ${flavour}).
# Every value below was quoted for the shell when this script was rendered.
# qsub options are given on the qsub command line, not as #PBS lines here.
# The local job's index is ${index_env} + ${offset}: an array task's index,
# or JIM_PBS_TASK (0) for a local job submitted as a job of its own.
JIM_PBS_TASK=${task}
export JIM_PBS_TASK
exec ${python} ${wrapper} --sandbox ${sandbox} --outroot ${outroot} --attempt ${attempt} \
    --index-env ${index_env} --index-offset ${offset}
