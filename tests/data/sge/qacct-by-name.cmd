["qacct", "-o", "root", "-j", "jim.20261122-070000-abcdef03.*"]
