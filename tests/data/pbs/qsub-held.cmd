["qsub", "-N", "jim.rec-held.0", "-h", "-j", "oe", "-o", "WORKDIR/held.out", "-l", "walltime=00:10:00", "WORKDIR/wait.sh"]
