["squeue", "-h", "-r", "-t", "all", "-j", "27", "-o", "%i|%A|%F|%K|%T|%r|%j|%k"]
