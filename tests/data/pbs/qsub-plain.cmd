["qsub", "-N", "jim.rec-plain.0", "-j", "oe", "-o", "WORKDIR/plain.out", "-r", "n", "-q", "debug", "WORKDIR/wait.sh"]
