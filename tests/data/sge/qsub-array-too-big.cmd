["qsub", "-terse", "-t", "1-100000", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "jim.20261122-070000-abcdef02.70", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
