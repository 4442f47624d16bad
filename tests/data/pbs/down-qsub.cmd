["qsub", "-N", "jim.test.0", "s.sh"]
