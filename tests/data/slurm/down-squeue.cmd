["squeue", "-h", "-r", "-t", "all", "-u", "root", "-o", "%i|%A|%F|%K|%T|%r|%j|%k"]
