["qstat", "-u", "root", "-g", "d"]
