#!/bin/sh
# Installs Debian's PyTorch (python3-torch) for /usr/bin/python3, the
# interpreter the worker-process example (example_torch.py) runs on. It does
# nothing when torch already imports. As root it calls apt-get; otherwise
# sudo -n apt-get (never a password prompt). It exits non-zero, saying why,
# when torch cannot be installed: the end-to-end torch test then skips.
#
# Usage: sh engine/workerproc/python/install-torch.sh
set -u
PY=${PYTHON:-/usr/bin/python3}

if [ ! -x "$PY" ]; then
	echo "install-torch: $PY not found; the torch example needs Debian's python3" >&2
	exit 1
fi
if "$PY" -c 'import torch' >/dev/null 2>&1 &&
	{ ! command -v dpkg >/dev/null 2>&1 || dpkg -s libopenblas0 >/dev/null 2>&1; }; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-torch: no apt-get here; install PyTorch for $PY by hand" >&2
	exit 1
fi
if [ "$(id -u)" = 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
	SUDO="sudo -n"
else
	echo "install-torch: not root and no password-less sudo; run: sudo apt-get install -y python3-torch" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# libopenblas0 is libtorch's first recommendation, named because the
# recommendations (build tools) are left out: without it torch runs on the
# reference BLAS, whose matrix products took 30x longer here.
# The package index may be missing on a fresh machine (Debian images ship
# without it); update once, then install. -o DPkg::Lock::Timeout waits for
# another apt run instead of failing on its lock.
if ! $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends python3-torch libopenblas0; then
	$SUDO apt-get -o DPkg::Lock::Timeout=600 update &&
		$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends python3-torch libopenblas0 ||
		{ echo "install-torch: apt-get could not install python3-torch" >&2; exit 1; }
fi
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
	echo "install-torch: python3-torch installed but $PY cannot import torch" >&2
	exit 1
fi
