["squeue", "-h", "-r", "-t", "all", "-j", "28", "-o", "%i|%A|%F|%K|%T|%r|%j|%k"]
