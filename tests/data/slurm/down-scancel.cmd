["scancel", "28"]
