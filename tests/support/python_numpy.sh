# python_numpy.sh - sourced by the command-line tests that need numpy: sets $py to a python3
# that imports numpy (the first on PATH, else Debian's: a pyenv shim may come first), or to ""
# when there is none (scripts/setup.sh installs python3-numpy).
py=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
