["sbatch", "--parsable", "-D", "/var/tmp/jim-test-slurm/jobs", "-o", "/dev/null", "-p", "nosuchqueue", "--job-name=jim-rec-badp", "--comment=jim:rec-badp", "--wrap", "/bin/true"]
