#!/usr/bin/env python3
"""Prints the ninja targets that the tests `meson test ARGS...` would run
need: each selected test's own program and the targets it names in
`depends` (meson introspect), relative to the build directory. scripts/test.sh
builds only these when BUILD_ONLY_TESTED=1, so that a sanitizer build that
runs some suites does not compile every program of the others.

  test_targets.py BUILD_DIR [--suite S]... [--no-suite S]...

Other `meson test` arguments are ignored. With no --suite, every suite is
selected. Exits 1, saying why, when no test is selected."""
import json
import os
import subprocess
import sys


def suites_of(test):
    # Suites read "project:suite" or "suite".
    return {s.split(':')[-1] for s in test['suite']}


def main(argv):
    build_dir = argv[1]
    want, skip = set(), set()
    args = argv[2:]
    for i, a in enumerate(args):
        if a in ('--suite', '--no-suite') and i + 1 < len(args):
            (want if a == '--suite' else skip).add(args[i + 1].split(':')[-1])
    intro = lambda what: json.loads(subprocess.check_output(
        ['meson', 'introspect', what, build_dir], text=True))
    tests, targets = intro('--tests'), intro('--targets')
    files_by_id = {t['id']: t['filename'] for t in targets}
    outputs = {f for files in files_by_id.values() for f in files}
    needed, selected = set(), 0
    for t in tests:
        s = suites_of(t)
        if (want and not s & want) or s & skip:
            continue
        selected += 1
        for dep in t.get('depends', []):
            needed.update(files_by_id.get(dep, []))
        for word in t['cmd']:
            if word in outputs:
                needed.add(word)
    if selected == 0:
        print(f'test_targets.py: no test selected by {" ".join(args)}', file=sys.stderr)
        return 1
    for f in sorted(needed):
        print(os.path.relpath(f, os.path.abspath(build_dir)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
