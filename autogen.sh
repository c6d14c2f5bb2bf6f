#!/bin/sh
# Regenerate configure and the Makefile.in files from a git checkout.
set -e
cd "$(dirname "$0")"
autoreconf --force --install --warnings=all
cp "$(automake --print-libdir)/tap-driver.sh" config/build-aux/tap-driver.sh
