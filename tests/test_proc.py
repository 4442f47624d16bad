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


def _status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _alive(pid: int) -> bool:
    try:
        return _status(pid)["State"][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_detached_process_sees_its_sigterm_though_the_caller_blocked_it():
    """A-REX's arched blocks nearly every signal and its children inherit the mask: a local job started
    from there must still be stopped by the SIGTERM of a cancel (and run its handler)."""
    script = textwrap.dedent(
        f"""
        import signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from jim.proc import spawn_detached
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}})
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        pid, _ = spawn_detached(["/bin/sleep", "60"])
        print(pid)
        """
    )
    pid = int(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)
    try:
        deadline = time.monotonic() + 60
        while _status(pid)["Name"] != "sleep":  # (exec'd)
            assert time.monotonic() < deadline, "the detached process never exec'd"
            time.sleep(0.05)
        fields = _status(pid)
        assert int(fields["SigBlk"], 16) == 0
        ignored = int(fields["SigIgn"], 16)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            assert not ignored & (1 << (sig - 1)), f"{sig.name} is ignored"
        os.kill(pid, signal.SIGTERM)
        while _alive(pid):
            assert time.monotonic() < deadline, "SIGTERM did not stop it"
            time.sleep(0.05)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
