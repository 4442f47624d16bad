["squeue", "-h", "-r", "-t", "all", "-j", "26", "-o", "%i|%A|%F|%K|%T|%r|%j|%k"]
