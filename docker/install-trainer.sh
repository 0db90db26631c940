#!/usr/bin/env bash
# Build stage of the Dockerfile: puts the example trainer into BINDIR as
# sluice-trainer. Run from the source tree after `make all build/sluice-trainer`
# and `make install DESTDIR=...`.
#
#   docker/install-trainer.sh BINDIR
#
# When `make install` installed sluice-trainer already there is nothing to
# do; otherwise the binary built under $BUILD (default build/) is installed.
# No trainer at all is an error: the image would be useless to the trainer
# services of docker-compose.yml.
set -euo pipefail

bindir=${1:?usage: install-trainer.sh BINDIR}
build=${BUILD:-build}

if [[ -x $bindir/sluice-trainer ]]; then
    exit 0
fi
if [[ -f $build/sluice-trainer && -x $build/sluice-trainer ]]; then
    install -d "$bindir"
    install -m 755 "$build/sluice-trainer" "$bindir/sluice-trainer"
    exit 0
fi
echo "install-trainer: no sluice-trainer in $bindir or under $build/;" >&2
echo "install-trainer: build the example trainer first (make $build/sluice-trainer)" >&2
exit 1
