["qsub", "-terse", "-t", "1-1", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "jim.20261122-070000-abcdef02.60", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
