["qsub", "-N", "jim.rec-array.0", "-t", "0-2", "-j", "oe", "-o", "WORKDIR/array.out-%a", "WORKDIR/wait.sh"]
