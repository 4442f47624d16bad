["qsub", "-N", "jim.rec-bad.0", "-q", "nosuchqueue", "WORKDIR/wait.sh"]
