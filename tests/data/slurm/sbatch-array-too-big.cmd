["sbatch", "--parsable", "-D", "/var/tmp/jim-test-slurm/jobs", "-o", "/dev/null", "--array=0-10001", "--job-name=jim-rec-big", "--comment=jim:rec-big", "--wrap", "/bin/true"]
