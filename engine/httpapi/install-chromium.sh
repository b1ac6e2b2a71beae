#!/bin/sh
# Installs Debian's chromium, the headless browser the status page's test
# loads GET / in (cmd/batchd TestServeStatusPage). It does nothing when
# chromium is already on PATH. As root it calls apt-get; otherwise
# sudo -n apt-get (never a password prompt). It exits non-zero, saying
# why, when chromium cannot be installed: that test then skips.
#
# Usage: sh engine/httpapi/install-chromium.sh
set -u
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-chromium: no apt-get here; install chromium by hand" >&2
	exit 1
fi
if [ "$(id -u)" = 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
	SUDO="sudo -n"
else
	echo "install-chromium: not root and no password-less sudo; run: sudo apt-get install -y chromium" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package index may be missing on a fresh machine: update once, then
# install; the lock timeout waits for another apt run.
install() {
	$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends chromium >/dev/null
}
if ! install; then
	$SUDO apt-get -o DPkg::Lock::Timeout=600 update >/dev/null && install ||
		{ echo "install-chromium: apt-get could not install chromium" >&2; exit 1; }
fi
if ! command -v chromium >/dev/null 2>&1; then
	echo "install-chromium: chromium installed but not on PATH" >&2
	exit 1
fi
