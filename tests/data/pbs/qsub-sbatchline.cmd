["qsub", "--sbatchline", "-N", "jim.rec-x.0", "-j", "oe", "-o", "WORKDIR/a b/out", "-r", "n", "WORKDIR/wait.sh"]
