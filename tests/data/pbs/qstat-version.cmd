["qstat", "--version"]
