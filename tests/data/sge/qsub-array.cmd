["qsub", "-terse", "-t", "1-10", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "jim.20261122-070000-abcdef02.50", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
