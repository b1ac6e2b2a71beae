#!/bin/sh
# Installs Debian's prometheus package for its promtool, which `make test`
# runs on the alert rules beside this script (alerts.yml). It does nothing
# when promtool is already on PATH. As root it calls apt-get; otherwise
# sudo -n apt-get (never a password prompt). It exits non-zero, saying
# why, when promtool cannot be installed: the rules check then skips.
# Recommended packages are left out (the server itself is not run).
#
# Usage: sh engine/httpapi/metrics/install-promtool.sh
set -u
if command -v promtool >/dev/null 2>&1; then
	exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-promtool: no apt-get here; install Prometheus's promtool by hand" >&2
	exit 1
fi
if [ "$(id -u)" = 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
	SUDO="sudo -n"
else
	echo "install-promtool: not root and no password-less sudo; run: sudo apt-get install -y prometheus" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package index may be missing on a fresh machine: update once, then
# install. -o DPkg::Lock::Timeout waits for another apt run (the torch
# install) instead of failing on its lock. policy-rc.d keeps the package's
# postinst from starting a Prometheus server where services can start.
install() {
	$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends prometheus >/dev/null
}
if ! install; then
	$SUDO apt-get -o DPkg::Lock::Timeout=600 update >/dev/null && install ||
		{ echo "install-promtool: apt-get could not install prometheus" >&2; exit 1; }
fi
if ! command -v promtool >/dev/null 2>&1; then
	echo "install-promtool: prometheus installed but promtool is not on PATH" >&2
	exit 1
fi
