"""A wheel install of jim, as a site would have it, for benchmarks.

The development ``.venv`` holds jim as an *editable* install, whose import
hook loads ``importlib.metadata`` at every interpreter start (~30 ms), and this
machine sets PYTHONDONTWRITEBYTECODE, so sources are recompiled at every
import.  Neither is true of a site install.  This builds jim's wheel, installs
it into a throw-away venv (pip byte-compiles it), and borrows the
dependencies (lxml, psutil, ...) from the running interpreter's environment
through a plain path entry, so no editable hook is loaded.
"""

from __future__ import annotations

import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def site_python(tmp: Path, source: Path = REPO) -> str:
    """Path of a python that imports jim from a wheel install (of the checkout ``source``); built once per
    ``tmp``."""
    venv = tmp / "site-venv"
    py = venv / "bin" / "python"
    if py.exists():
        return str(py)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    wheels = tmp / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wheel = next(wheels.glob("*.whl"))
    target = next((venv / "lib").glob("python3*/site-packages"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--compile", "--target", str(target), str(wheel)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (target / "zz_jim_bench_deps.pth").write_text("\n".join(deps) + "\n")
    # the borrowed site-packages holds the editable hook's .pth; plain path lines do not run it
    subprocess.run([str(py), "-c", "import compileall, sys; compileall.compile_path(quiet=2)"], check=False)
    return str(py)


def jim_command(tmp: Path, source: Path = REPO) -> list[str]:
    """argv prefix that runs jim exactly as its ``jim`` console script does (no runpy, unlike ``-m``)."""
    return [site_python(tmp, source), "-c", "import sys; from jim.cli import main; sys.exit(main())"]
