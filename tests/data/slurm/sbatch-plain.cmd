["sbatch", "--parsable", "-D", "/var/tmp/jim-test-slurm/jobs", "-o", "/dev/null", "--job-name=jim-rec-plain", "--comment=jim:rec-plain", "--wrap", "/bin/true"]
