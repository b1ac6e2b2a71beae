#!/bin/sh
# Puts Debian's promtool (from the prometheus package) at
# bin/opstools/usr/bin/promtool, where the tests of the alert rules and the
# dashboard (engine/httpapi/metrics, cmd/batchd) look when promtool is not
# on PATH. The package is downloaded and unpacked, not installed: no
# Prometheus server is set up or started, and no root is needed while the
# package index is present (on a fresh machine without one, root or
# sudo -n runs apt-get update first). It does nothing when promtool is on
# PATH or already unpacked, and exits non-zero, saying why, when it cannot
# get promtool: those tests then skip.
#
# Usage: sh engine/httpapi/metrics/install-promtool.sh
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
DEST="$ROOT/bin/opstools"
if command -v promtool >/dev/null 2>&1 || [ -x "$DEST/usr/bin/promtool" ]; then
	exit 0
fi
for tool in apt-get dpkg-deb; do
	if ! command -v $tool >/dev/null 2>&1; then
		echo "install-promtool: no $tool here; install Prometheus's promtool by hand" >&2
		exit 1
	fi
done
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
download() { (cd "$TMP" && apt-get -o DPkg::Lock::Timeout=600 download prometheus >/dev/null 2>&1); }
if ! download; then
	# The package index may be missing on a fresh machine: update it once.
	if [ "$(id -u)" = 0 ]; then
		SUDO=
	elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
		SUDO="sudo -n"
	else
		echo "install-promtool: apt-get download prometheus failed, and apt-get update needs root or password-less sudo" >&2
		exit 1
	fi
	$SUDO apt-get -o DPkg::Lock::Timeout=600 update >/dev/null && download ||
		{ echo "install-promtool: apt-get could not download prometheus" >&2; exit 1; }
fi
mkdir -p "$DEST" && dpkg-deb -x "$TMP"/prometheus_*.deb "$TMP/x" &&
	mkdir -p "$DEST/usr/bin" && cp "$TMP/x/usr/bin/promtool" "$DEST/usr/bin/promtool" ||
	{ echo "install-promtool: could not unpack promtool from the package" >&2; exit 1; }
if ! "$DEST/usr/bin/promtool" --version >/dev/null 2>&1; then
	echo "install-promtool: $DEST/usr/bin/promtool does not run" >&2
	exit 1
fi
