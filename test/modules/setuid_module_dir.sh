#!/usr/bin/env bash
# LIBRPC_MODULE_DIR is read with secure_getenv: in a set-user-ID program it
# is ignored, as LD_LIBRARY_PATH is, so that the user who starts a
# privileged program cannot choose the code it dlopens. Runs a set-user-ID
# root copy of module_tests as the user nobody, with the variable set.
#
#   setuid_module_dir.sh MODULE_TESTS
# Exit 77 (skipped) unless run as root with setpriv available.
set -u
tests=${1:?usage: setuid_module_dir.sh MODULE_TESTS}
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null; then
  echo "SKIP: needs root and setpriv (util-linux) to make and run a set-user-ID program"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
cp "$tests" "$dir/module_tests"
chown root:root "$dir/module_tests"
chmod 4755 "$dir/module_tests"
# The copy finds its shared libraries through absolute paths only (the
# dynamic linker ignores LD_LIBRARY_PATH and $ORIGIN for it); module_tests
# links the engine statically and needs only system libraries.
cd "$dir"
setpriv --reuid=65534 --regid=65534 --clear-groups \
  env LIBRPC_MODULE_DIR=/tmp/chosen-by-the-caller ./module_tests "[.setuid]"
