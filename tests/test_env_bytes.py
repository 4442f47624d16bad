"""The job's environment reaches it byte for byte, as its arguments do.

The values of the description's ``environment`` may hold any character but
NUL (control characters, tabs, multibyte UTF-8, long values): the local job
sees exactly those bytes, whatever the grid job's record (XML, which cannot
hold some of them) shows.
"""

from __future__ import annotations

import json
import sys

VALUES = {
    "JIM_T_CTRL": "a\x01b\x02c\x7fd",
    "JIM_T_ESC": "\x1b[31mred\x1b[0m",
    "JIM_T_TAB": "one\ttwo\t",
    "JIM_T_UTF8": "é€𝄞 ünïcödé",
    "JIM_T_LONG": "x\x01y" * 30000,
    "JIM_T_MIXED": " \x0b\x0c\x1f~\x1b",
}

# The job writes its environment as bytes (os.environb), NUL-separated, to a file in its output directory.
DUMP = (
    "import os; f = open(os.environ['JIM_OUTDIR'] + '/env.bin', 'wb'); "
    "f.write(b''.join(k + b'=' + v + b'\\0' for k, v in sorted(os.environb.items()))); f.close()"
)


def _environ_of_job(jim_env, tmp_path, desc: dict) -> dict[bytes, bytes]:
    f = tmp_path / "desc.json"
    f.write_text(json.dumps(desc))
    out = jim_env.protocol("submit", "--description", str(f))
    assert "JOB_ID" in out, out
    job = out["JOB_ID"]
    assert jim_env.wait(job)["JOB_STATE"] == "DONE"
    dump = (jim_env.home / "jobs" / job / "local" / "0" / "env.bin").read_bytes()
    return dict(entry.split(b"=", 1) for entry in dump.split(b"\0") if entry)


def test_environment_values_reach_the_job_byte_for_byte(jim_env, tmp_path):
    desc = {
        "executable": [sys.executable],
        "arguments": ["-c", DUMP],
        "environment": [[k, v] for k, v in sorted(VALUES.items())],
    }
    env = _environ_of_job(jim_env, tmp_path, desc)
    wrong = {
        name: env.get(name.encode(), b"")[:40]
        for name, value in VALUES.items()
        if env.get(name.encode()) != value.encode()
    }
    assert not wrong, f"values that did not reach the job as they were described: {wrong}"
