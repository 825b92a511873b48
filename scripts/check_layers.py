#!/usr/bin/env python3
"""Checks that the includes between the folders of src/ point one way: down
the layers below, never up or sideways (docs/design.md, "Layers"). Prints
the folder-level import graph; exits 1 listing every include that breaks
the order. Usage: scripts/check_layers.py [SRC_DIR]"""
import collections
import os
import re
import sys

# Bottom to top. A folder may include only folders of a lower rank.
LAYERS = {
    "common": 0,
    "wire": 1,
    "cc": 1,
    "memory": 2,
    "transport": 2,
    "session": 3,
    "nexus": 4,
    "rpc": 5,
}


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    graph = collections.defaultdict(set)
    bad = []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".cc", ".h")):
                continue
            path = os.path.join(root, name)
            folder = os.path.relpath(path, src).split(os.sep)[0]
            if folder not in LAYERS:
                bad.append(f"{path}: folder '{folder}' has no layer (add it to LAYERS)")
                continue
            with open(path) as f:
                for line_no, line in enumerate(f, 1):
                    m = re.match(r'\s*#include "([^"/]+)/', line)
                    if not m or m.group(1) not in LAYERS or m.group(1) == folder:
                        continue
                    target = m.group(1)
                    graph[folder].add(target)
                    if LAYERS[target] >= LAYERS[folder]:
                        bad.append(f"{path}:{line_no}: {folder} includes {target} "
                                   f"({line.strip()}), which is not below it")
    for folder in sorted(LAYERS, key=lambda k: (LAYERS[k], k)):
        print(f"{folder:10} -> {', '.join(sorted(graph[folder], key=lambda k: (LAYERS[k], k))) or '-'}")
    for b in bad:
        print("UPWARD:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
