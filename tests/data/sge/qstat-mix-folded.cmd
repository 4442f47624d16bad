["qstat", "-u", "root", "-xml"]
