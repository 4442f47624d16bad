["scontrol", "ping"]
