["scontrol", "show", "config"]
