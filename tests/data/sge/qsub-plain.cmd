["qsub", "-terse", "-wd", "/var/tmp/jim-test-sge/jobs/record", "-o", "/dev/null", "-j", "y", "-N", "other-job", "/var/tmp/jim-test-sge/jobs/record/true.sh"]
