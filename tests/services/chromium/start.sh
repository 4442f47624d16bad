#!/usr/bin/env bash
# start.sh -- make Debian's headless-capable `chromium` available for jim's
# browser tests (tests/test_web_browser.py). Idempotent and quick when the
# package is already installed. Run as root; Debian 12. No browser download
# other than the distribution's package (no `playwright install`).
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1; then
    echo "chromium present: $(chromium --version 2>/dev/null)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "chromium is missing and installing it needs root (apt-get install chromium)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# apt-get update first when the package lists do not know chromium (fresh image)
if ! apt-cache show chromium >/dev/null 2>&1; then
    apt-get update -qq
fi
if ! apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
chromium --version
