["qsub", "-terse", "-t", "1-2", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "jim:bad", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
