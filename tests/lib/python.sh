# Python side of the integration tests; source it after integration.sh. Gives:
#   py ARGS...   /usr/bin/python3 with the sluice package of this tree
#                (PYTHONPATH=python) over $BUILD/libsluice.so (SLUICE_LIB)
#   PYCMD        the same as an array, for bg: bg OUT ERR "${PYCMD[@]}" ARGS...
# A library built with ASan (make asan) needs the ASan runtime loaded
# first: the command then preloads the libasan the library names, with
# leak detection off (the interpreter never frees everything at exit).
# shellcheck shell=bash
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
export SLUICE_LIB=$BUILD/libsluice.so
[[ -f $SLUICE_LIB ]] || fail "$SLUICE_LIB is not built (make all)"
PYCMD=("$PY")
_py_asan=$(ldd "$SLUICE_LIB" 2>/dev/null | awk '/libasan/ && !n++ { print $3 }')
if [[ -n $_py_asan ]]; then
    PYCMD=(env "LD_PRELOAD=$_py_asan${LD_PRELOAD:+:$LD_PRELOAD}"
           "ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$PY")
fi
py() { "${PYCMD[@]}" "$@"; }
