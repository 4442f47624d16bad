["qstat", "-u", "root", "-xml", "-g", "d"]
