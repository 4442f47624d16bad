"""jim's detached processes (jim.proc): a clean start whatever the caller blocked or ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_detached_process_sees_its_sigterm_though_the_caller_blocked_it(tmp_path: Path):
    """A-REX's arched blocks nearly every signal and its children inherit the mask: a local job started
    from there must still be stopped by the SIGTERM of a cancel (and run its handler)."""
    out = tmp_path / "status"
    script = textwrap.dedent(
        f"""
        import signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from jim.proc import spawn_detached
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}})
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        pid, _ = spawn_detached(["/bin/sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/$$/status > {out}.tmp; "
                                 "mv {out}.tmp {out}; exec sleep 60"])
        print(pid)
        """
    )
    pid = int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)
    try:
        deadline = time.monotonic() + 60
        while not out.exists():
            assert time.monotonic() < deadline, "the detached process never started"
            time.sleep(0.05)
        fields = dict(line.split(":") for line in out.read_text().splitlines())
        assert int(fields["SigBlk"], 16) == 0
        ignored = int(fields["SigIgn"], 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            assert not ignored & (1 << (sig - 1)), f"{sig.name} is ignored"
    finally:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
