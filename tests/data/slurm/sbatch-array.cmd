["sbatch", "--parsable", "-D", "/var/tmp/jim-test-slurm/jobs", "-o", "/dev/null", "--array=0-9", "--job-name=jim-rec-array", "--comment=jim:rec-array", "--wrap", "/bin/true"]
