#!/usr/bin/env bash
# Installs the Debian packages sluice needs to build and test, when missing.
# Prints nothing and exits 0 when everything is installed already (the
# Makefile runs it before every build). Never starts redis-server as a
# service: tests start their own private servers.
#
#   scripts/install-deps.sh                          # what the build needs
#   scripts/install-deps.sh dataset-fashion-mnist    # that too (make demo)
#   scripts/install-deps.sh python3-torch dataset-fashion-mnist   # make test
#   scripts/install-deps.sh python3-hiredis dataset-fashion-mnist # make bench (optional)
set -euo pipefail

PKGS=(
    build-essential pkg-config
    libhiredis-dev libevent-dev libmsgpack-dev zlib1g-dev libssl-dev liblz4-dev libzstd-dev
    redis-server redis-tools
    python3 python3-msgpack python3-redis python3-numpy
    procps coreutils docker-compose openssl
)
# Extra packages a caller needs besides the build's (arguments).
PKGS+=("$@")

missing=()
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $st == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

echo "install-deps: missing Debian packages: ${missing[*]}" >&2

if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
    if ! sudo -n true 2>/dev/null; then
        # sudo may still ask for a password on a terminal.
        if [[ -t 0 ]]; then SUDO=(sudo); else
            echo "install-deps: need root to install packages; run as root or configure passwordless sudo:" >&2
            echo "    apt-get install -y ${missing[*]}" >&2
            exit 1
        fi
    fi
else
    echo "install-deps: not root and sudo is not available; as root run:" >&2
    echo "    apt-get install -y ${missing[*]}" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# A package's postinst must not start redis-server as a system service:
# policy-rc.d exit 101 forbids service starts for the duration of the install.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 755 "$policy"
    added_policy=1
fi
cleanup() { ((added_policy)) && "${SUDO[@]}" rm -f "$policy"; return 0; }
trap cleanup EXIT

APT=("${SUDO[@]}" apt-get -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)

# apt_retry WHAT ARGS...: runs apt-get ARGS; when it fails because another
# apt/dpkg holds the lock (past DPkg::Lock::Timeout) or a download failed,
# says so, waits and tries again (4 attempts). Other failures are final.
apt_retry() {
    local what=$1 attempt log rc holders
    shift
    log=$(mktemp)
    for attempt in 1 2 3 4; do
        echo "install-deps: $what (attempt $attempt)" >&2
        rc=0
        "${APT[@]}" "$@" 2>&1 | tee "$log" >&2 || rc=$?
        if ((rc == 0)); then rm -f "$log"; return 0; fi
        if grep -qiE 'could not get lock|unable to acquire|lock-frontend|is another process using it' "$log"; then
            holders=$(fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock 2>/dev/null | xargs -r ps -o pid=,args= -p 2>/dev/null | head -n 3 || true)
            echo "install-deps: waiting for the apt/dpkg lock held by: ${holders:-another package manager}; retrying in 20 s" >&2
        elif grep -qiE 'failed to fetch|temporary failure|could not resolve|connection (timed out|refused)|hash sum mismatch' "$log"; then
            echo "install-deps: a download failed; retrying in 20 s" >&2
        else
            break
        fi
        sleep 20
    done
    rm -f "$log"
    echo "install-deps: $what failed" >&2
    return 1
}

apt_retry "apt-get update" update -q || exit 1
apt_retry "apt-get install ${missing[*]}" install -y -q --no-install-recommends "${missing[@]}" || exit 1

# Some images start the service despite policy-rc.d (systemd preset): stop
# and disable it so nothing listens on 6379 behind our back.
if [[ " ${missing[*]} " == *" redis-server "* ]] && command -v systemctl >/dev/null 2>&1 \
   && [[ -d /run/systemd/system ]]; then
    "${SUDO[@]}" systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
echo "install-deps: done" >&2
