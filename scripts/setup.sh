#!/usr/bin/env bash
# Install what deskfleet needs on a fresh Debian machine; safe to run again (it skips what is done).
#   system: Xvfb + xauth (desktop tests and the demo), xdotool, xterm (the live-view tests type into
#           a real terminal), ffmpeg (a run export's recording as video), Debian's Chromium (Playwright drives
#           it through executable_path: `playwright install` cannot download here)
#   corpus: python-flask-doc, Flask's HTML documentation (~0.7 MB), the research answer benchmark's
#           real pages (bench/research_answers.py, tests/unit/research/test_passages.py)
#   python: a virtual environment in .venv with the project installed in editable mode, its
#           dependencies at the versions of constraints.txt
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(xvfb xauth xdotool x11-utils xterm ffmpeg chromium python-flask-doc)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# systemd-analyze checks the installers' unit files (tests/e2e/project/test_installers.py); no systemd needs
# to be running for that.
command -v systemd-analyze >/dev/null || missing+=(systemd)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
# Reinstall only when the project's dependencies or their pinned versions changed. The
# constraints pin the whole dependency closure to the versions the suite passed with
# (scripts/freeze_constraints.py writes them); pyproject.toml keeps the compatible ranges.
stamp=.venv/.deskfleet-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing the project and its dependencies into .venv"
  # uv installs the same pinned closure in about 14 s where pip takes about 60 (most of a fresh
  # clone's `make test` setup); pip stays the way when uv cannot be had. setuptools is named
  # because pip's venv has it and the installers' no-build-isolation install uses it, pip at its
  # current release as pip's own path installs it (the installers' pip runs from here). Bytecode is
  # compiled at install, as pip does: a dependency's source compiled at import under the
  # suite's warnings-as-errors fails on its invalid escape sequences (pysbd's, for one).
  if .venv/bin/pip install -q --disable-pip-version-check uv >/dev/null 2>&1 \
    && .venv/bin/uv pip install -q --python .venv/bin/python --upgrade pip \
    && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -c constraints.txt \
      -e '.[dev]' setuptools; then
    :
  else
    echo "setup: uv was not available; installing with pip"
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -c constraints.txt -e '.[dev]'
  fi
  echo "$want" > "$stamp"
fi
