["scancel", "999999"]
