#!/bin/sh
# Install the Debian packages the build needs, if any are missing. Idempotent; quiet when all
# are present. Needs root or sudo only when something must be installed.
set -eu
PKGS="libopenblas-dev libcjson-dev libhdf5-dev libcmocka-dev pkg-config hdf5-tools gnuplot-nox"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq $missing >&2
