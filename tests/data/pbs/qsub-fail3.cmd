["qsub", "-N", "jim.rec-fail.0", "-j", "oe", "-o", "WORKDIR/fail3.out", "-r", "n", "WORKDIR/fail3.sh"]
