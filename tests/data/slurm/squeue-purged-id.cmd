["squeue", "-h", "-r", "-t", "all", "-j", "16", "-o", "%i|%A|%F|%K|%T|%r|%j|%k"]
