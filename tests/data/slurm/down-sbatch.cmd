["sbatch", "--parsable", "-D", "/var/tmp/jim-test-slurm/jobs", "-o", "/dev/null", "--job-name=jim-rec-down", "--comment=jim:rec-down", "--wrap", "/bin/true"]
