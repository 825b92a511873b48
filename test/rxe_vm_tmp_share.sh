#!/usr/bin/env bash
# scripts/rxe-vm.sh shows the guest the host paths its command needs under
# the guest's own tmpfs mounts (/tmp, /var/tmp, /dev/shm, /run): issue 28,
# where a build directory in /tmp was hidden and the verbs suite failed
# with "No such file or directory". One VM boot with a tiny command, which
# is itself in a fresh directory in /tmp, reached through a symlink there,
# and reads a file directly in /tmp (an argument), a file in /var/tmp
# (shared with -s) and writes back into its directory. Used by
# `meson test --suite verbs`; skips (77) unless root.
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
. "$here/rxe_vm_common.sh" # skips (77) unless root; sets vm
dir=$(mktemp -d /tmp/librpc-share-test.XXXXXX)
vdir=$(mktemp -d /var/tmp/librpc-share-test.XXXXXX)
file=$(mktemp /tmp/librpc-share-test.XXXXXX)
hidden=$(mktemp /tmp/librpc-share-test.XXXXXX) # not needed: stays hidden
link=$dir.link
trap 'rm -rf "$dir" "$vdir" "$file" "$hidden" "$link"' EXIT
ln -s "$dir" "$link"
echo in-tmp >"$file"
echo in-var-tmp >"$vdir/data"
mkdir "$dir/bin"
cat >"$dir/bin/check.sh" <<EOF_CHECK
#!/bin/sh
set -ex
[ "\$(cat "\$1")" = in-tmp ]
[ "\$(cat '$vdir/data')" = in-var-tmp ]
[ ! -e '$hidden' ]
echo from-guest >'$dir/out'
EOF_CHECK
chmod 755 "$dir/bin/check.sh"
cd "$here/.." || exit 1 # the repository: the guest's working directory
bash "$vm" -t 120 -s "$vdir" -- "$link/bin/check.sh" "$file" || exit 1
[ "$(cat "$dir/out" 2>/dev/null)" = from-guest ] || { echo "FAIL: nothing written back to $dir/out"; exit 1; }
echo "PASS"
