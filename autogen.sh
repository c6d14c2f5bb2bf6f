#!/bin/sh
# Regenerate configure and the Makefile.in files from a git checkout.
set -e
cd "$(dirname "$0")"
autoreconf --force --install --warnings=all
# The test drivers tests/local.mk names (automake copies neither when
# LOG_DRIVER is set).
for driver in tap-driver.sh test-driver; do
    cp "$(automake --print-libdir)/$driver" "config/build-aux/$driver"
done
