#!/usr/bin/env python3
"""Sums Catch2 test cases across a meson test log and prints one line:
'tests: N passed, M failed, K skipped'. Usage: test_summary.py BUILD_DIR/meson-logs/testlog.json"""
import json
import re
import sys

passed = failed = skipped = 0
with open(sys.argv[1]) as log:
    for line in log:
        entry = json.loads(line)
        out = entry.get("stdout", "") or ""
        all_ok = re.search(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)", out)
        mixed = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed", out)
        if entry.get("result") == "SKIP":
            skipped += 1  # e.g. the netns suite when not root
        elif all_ok:
            passed += int(all_ok.group(1))
        elif mixed:
            passed += int(mixed.group(2))
            failed += int(mixed.group(3))
        elif entry.get("result") == "OK":
            passed += 1  # a test executable that is not Catch2
        else:
            failed += 1  # crashed or timed out before Catch2 could report
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
