["qstat", "-g", "c"]
