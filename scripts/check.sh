#!/usr/bin/env bash
# jim's quality gates: lint (with the complexity and argument-count rules), format
# and types. Fails on the first that does not pass.
#
#   scripts/check.sh            (needs .venv: scripts/setup.sh makes it)
#
# mypy (--strict, from pyproject.toml; the worker-node wrapper's functions may stay
# unannotated) checks the package as it is installed (jim.adapters, jim.handlers and
# jim.sandbox come from the top-level adapters/, handlers/ and sandbox/): it
# reads a tree of links under build/typecheck that has that shape.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export PATH="$PWD/.venv/bin:$PATH"
SOURCES=(jim adapters handlers sandbox tests bench examples)

echo "== ruff check"
ruff check "${SOURCES[@]}"
echo "== ruff format --check"
ruff format --check "${SOURCES[@]}"

echo "== mypy"
tree=build/typecheck
rm -rf "$tree"
mkdir -p "$tree/jim"
for entry in jim/*; do
    ln -s "$PWD/$entry" "$tree/jim/"
done
for package in adapters handlers sandbox; do
    ln -s "$PWD/$package" "$tree/jim/$package"
done
(cd "$tree" && "$OLDPWD/$PY" -m mypy --config-file "$OLDPWD/pyproject.toml" -p jim)
