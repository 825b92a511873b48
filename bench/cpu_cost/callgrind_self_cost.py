#!/usr/bin/env python3
"""Sums self instruction counts (Ir) per object file in a callgrind output
file. Usage: callgrind_self_cost.py CALLGRIND_OUT [OBJECT_SUBSTRING]
Prints "<Ir> <object>" per object, or only the total of objects whose path
contains OBJECT_SUBSTRING."""
import re
import sys


def self_cost_by_object(path):
    names = {}  # compressed "(id)" -> name, per kind
    current_ob = None
    costs = {}
    skip_next_cost = False
    positions = 1
    ir_index = 0
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith("positions:"):
                positions = len(line.split()[1:])
            elif line.startswith("events:"):
                ir_index = line.split()[1:].index("Ir")
            m = re.match(r"^(ob|fl|fi|fe|fn|cob|cfi|cfl|cfn)=(?:\((\d+)\))?\s*(.*)$", line)
            if m:
                kind, ident, name = m.groups()
                key = ("ob" if kind in ("ob", "cob") else kind, ident)
                if ident is not None and name:
                    names[key] = name
                resolved = names.get(key, name) if ident is not None else name
                if kind == "ob":
                    current_ob = resolved
                continue
            if line.startswith("calls="):
                skip_next_cost = True  # the next cost line is the call's inclusive cost
                continue
            if line and (line[0].isdigit() or line[0] in "+-*"):
                if skip_next_cost:
                    skip_next_cost = False
                    continue
                fields = line.split()
                values = fields[positions:]
                if len(values) > ir_index:
                    costs[current_ob] = costs.get(current_ob, 0) + int(values[ir_index])
    return costs


def main():
    costs = self_cost_by_object(sys.argv[1])
    if len(sys.argv) > 2:
        print(sum(v for k, v in costs.items() if k and sys.argv[2] in k))
        return
    for ob, ir in sorted(costs.items(), key=lambda kv: -kv[1]):
        print(ir, ob)


main()
