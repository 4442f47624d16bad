["sacct", "-n", "-P", "-o", "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,JobName,Comment", "-j", "15,16,17,18"]
