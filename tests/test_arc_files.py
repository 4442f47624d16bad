"""ARC's file semantics through real CEs and the real client: inputs, declared outputs, uploads.

One ARC job of 3 local jobs (jim on fork behind each test CE, ``each_arc``): ``arcsub`` uploads
its input file into the session directory, where every local job reads it by its name (jim's view
of the session directory, ``directoryview``); the declared outputs come back under their names
through ``arcget``, merged by concatenation in local-job order (a declared directory file by
file); and the output declared with an upload URL (a loopback HTTP server that accepts PUT,
tests/support/putserver.py) is uploaded there by A-REX from the merged file.  See docs/arc.md,
"Files".
"""

from __future__ import annotations

import pytest

from support import arc as arc_ce
from support.putserver import PutServer

pytestmark = [pytest.mark.arc, pytest.mark.slow]

LOCAL_JOBS = 3

SCRIPT = """#!/bin/sh
# every local job: reads the staged input by its name, writes its own copy of each declared output
cat input.txt > result.dat
echo "local job $JIM_INDEX" >> result.dat
mkdir -p plots && echo "plot $JIM_INDEX" > plots/p.txt
echo "up $JIM_INDEX" > up.dat
echo "read: $(cat input.txt)"
"""


def xrsl(upload: str) -> str:
    return f"""&(executable="files.sh")
 (inputfiles=("files.sh" "{{dir}}/files.sh")("input.txt" "{{dir}}/input.txt"))
 (jobname="arc-files")
 (stdout="out.txt")(stderr="err.txt")
 (outputfiles=("out.txt" "")("err.txt" "")("jim-output.tar.gz" "")("result.dat" "")("plots/" "")
              ("up.dat" "{upload}"))
 (runtimeenvironment="ENV/JIM/GENERIC" "count={LOCAL_JOBS}")
 (walltime="30 minutes")
"""


def test_inputs_seen_declared_outputs_returned_and_uploaded(each_arc: arc_ce.ArcCE):
    ce = each_arc
    with PutServer() as server:
        job = ce.submit(
            "arc-files", xrsl(server.url("up.dat")), {"files.sh": SCRIPT, "input.txt": "the input {marker}\n"}
        )
        try:
            fields = ce.wait(job, "Finished", timeout=300)
            assert fields.get("Exit Code") == "0", fields
            uploaded = server.wait_for("up.dat", timeout=60)
            got = ce.get(job)
        finally:
            ce.clean(job)
    line = f"the input {job.marker}"
    # every local job read the input A-REX staged, by its name in the session directory
    assert [x for x in (got / "out.txt").read_text().splitlines() if x.startswith("read:")] == [f"read: {line}"] * 3
    # the declared outputs under their names, concatenated in local-job order
    assert (got / "result.dat").read_text() == "".join(f"{line}\nlocal job {k}\n" for k in range(LOCAL_JOBS))
    assert (got / "plots" / "p.txt").read_text() == "".join(f"plot {k}\n" for k in range(LOCAL_JOBS))
    # the output with an upload URL: uploaded by A-REX, the merged file
    assert uploaded == "".join(f"up {k}\n" for k in range(LOCAL_JOBS)).encode()
