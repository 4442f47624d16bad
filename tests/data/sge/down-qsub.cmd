["qsub", "-terse", "-t", "1-2", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "jim.20261122-070000-abcdef03.50", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
