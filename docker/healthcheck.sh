#!/usr/bin/env bash
# Container healthcheck for the HTTP endpoints of sluice-producer and
# `sluice-ctl metrics`: healthy (exit 0) when GET PATH on 127.0.0.1:PORT
# answers with status 200 within 3 seconds.
#
#   sluice-healthcheck PORT [PATH]        PATH defaults to /healthz
#
# Uses bash's /dev/tcp so that the runtime image needs no curl or wget.
set -uo pipefail

# A server that accepts but never answers must not hang the check until
# Docker's own timeout: run the check itself under timeout(1).
if [[ ${1:-} != --bounded ]]; then
    exec timeout 3 bash "${BASH_SOURCE[0]}" --bounded "$@"
fi
shift
port=${1:?usage: sluice-healthcheck PORT [PATH]}
path=${2:-/healthz}

exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$path" >&3 || exit 1
IFS= read -r status <&3 || exit 1
# The status line is "HTTP/1.1 200 OK\r".
[[ $status =~ ^HTTP/1\.[01]\ 200([^0-9]|$) ]]
