#!/usr/bin/env python3
"""Summarises a meson test log in plain words. Prints each skipped test
program with the reason it gave, one line counting meson's test programs
and suites, and the closing line 'tests: N passed, M failed, K skipped',
where N and M count Catch2 test cases (plus test programs that are not
Catch2) and K counts skipped test programs.
Usage: test_summary.py BUILD_DIR/meson-logs/testlog.json"""
import json
import re
import sys

passed = failed = skipped = 0
programs = {"OK": 0, "SKIP": 0, "other": 0}
suites = set()
skip_lines = []
with open(sys.argv[1]) as log:
    for line in log:
        entry = json.loads(line)
        out = entry.get("stdout", "") or ""
        # "librpc:SUITE+SUITE2 / NAME"
        suites.update(entry.get("name", "").split(" / ")[0].split(":")[-1].split("+"))
        result = entry.get("result")
        programs[result if result in programs else "other"] += 1
        all_ok = re.search(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)", out)
        mixed = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed", out)
        if result == "SKIP":
            skipped += 1  # e.g. the verbs suite without an RDMA device, netns when not root
            said = [l.strip() for l in (out + (entry.get("stderr") or "")).splitlines()
                    if "skip" in l.lower()]
            skip_lines.append(f"skipped: {entry.get('name')}: "
                              f"{said[-1] if said else '(the test gave no reason)'}")
        elif all_ok:
            passed += int(all_ok.group(1))
        elif mixed:
            passed += int(mixed.group(2))
            failed += int(mixed.group(3))
        elif result == "OK":
            passed += 1  # a test executable that is not Catch2
        else:
            failed += 1  # crashed or timed out before Catch2 could report
for s in skip_lines:
    print(s)
total = sum(programs.values())
print(f"meson: {total} test programs in {len(suites)} suites: {programs['OK']} ok, "
      f"{programs['other']} failed, {programs['SKIP']} skipped")
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped "
      "(Catch2 test cases and other test programs; skipped: test programs)")
sys.exit(1 if failed else 0)
