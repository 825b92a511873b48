#!/usr/bin/env python3
"""Linearizability checker for register histories (apps/smr).

Reads the history librpc-smr-client's `history` subcommand writes (one JSON
object a line: client, op "read"/"write", key, value, invoke_ns,
complete_ns, outcome "ok"/"fail"/"info") and decides, for each key on its
own (registers compose: a history is linearizable iff each key's is), whether
some total order of the operations respects real time and register semantics.

The search is Wing & Gong's, with Lowe's memoisation (WGL): repeatedly pick
an operation that may go first (no other pending operation completed before
it was invoked), apply it to the register, and backtrack on a contradiction;
(set of linearized operations, register value) states already explored are
not explored again.

Outcomes: "ok" operations must be linearized. "fail" ones certainly did not
happen and are dropped. "info" writes may or may not have happened, at any
time after their invocation: they may be linearized (with no completion
bound) or left out. "info" reads say nothing and are dropped.

    linearizability.py HISTORY.jsonl     exit 0: linearizable, 1: not, 2: bad input
"""
import json
import math
import sys
from collections import defaultdict


class Op:
    __slots__ = ("kind", "value", "invoke", "complete", "required", "desc")

    def __init__(self, kind, value, invoke, complete, required, desc):
        self.kind = kind  # "read" or "write"
        self.value = value  # written, or read (None: the key was absent)
        self.invoke = invoke
        self.complete = complete  # math.inf for an info write
        self.required = required  # False for info writes: may be left out
        self.desc = desc


def ops_from_records(records):
    """Groups history records into per-key operation lists."""
    by_key = defaultdict(list)
    for r in records:
        kind, outcome = r["op"], r["outcome"]
        if kind not in ("read", "write") or outcome not in ("ok", "fail", "info"):
            raise ValueError(f"bad record: {r}")
        if outcome == "fail" or (outcome == "info" and kind == "read"):
            continue
        complete = math.inf if outcome == "info" else r["complete_ns"]
        if complete < r["invoke_ns"]:
            raise ValueError(f"completes before it starts: {r}")
        desc = f'client {r["client"]} {kind} {r["key"]}={r["value"]} ({outcome})'
        by_key[r["key"]].append(
            Op(kind, r["value"], r["invoke_ns"], complete, outcome == "ok", desc))
    return by_key


def check_register(ops, initial=None):
    """True when the operations on one register are linearizable."""
    n = len(ops)
    required_mask = 0
    for i, op in enumerate(ops):
        if op.required:
            required_mask |= 1 << i
    order = sorted(range(n), key=lambda i: ops[i].invoke)
    seen = set()
    sys.setrecursionlimit(max(10000, 4 * n + 100))

    def search(done, value):
        if done & required_mask == required_mask:
            return True
        if (done, value) in seen:
            return False
        seen.add((done, value))
        # An operation may go next only if it was invoked before every
        # pending required operation completed (info writes never complete).
        horizon = min((ops[i].complete for i in range(n)
                       if not done >> i & 1 and ops[i].required), default=math.inf)
        for i in order:
            if done >> i & 1:
                continue
            op = ops[i]
            if op.invoke > horizon:
                break  # sorted by invocation: no later one may go first either
            if op.kind == "read":
                if op.value != value:
                    continue
                if search(done | 1 << i, value):
                    return True
            elif search(done | 1 << i, op.value):
                return True
        return False

    return search(0, initial)


def check_history(records):
    """{key: linearizable?} for every key of the history."""
    return {key: check_register(ops) for key, ops in ops_from_records(records).items()}


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(argv[1]) as f:
            records = [json.loads(line) for line in f if line.strip()]
        results = check_history(records)
    except (OSError, ValueError, KeyError) as e:
        print(f"linearizability: cannot read {argv[1]}: {e}", file=sys.stderr)
        return 2
    bad = sorted(k for k, ok in results.items() if not ok)
    counts = defaultdict(int)
    for r in records:
        counts[r["outcome"]] += 1
    print(f"linearizability: {len(records)} operations on {len(results)} keys "
          f"(ok {counts['ok']}, fail {counts['fail']}, info {counts['info']}): "
          + ("LINEARIZABLE" if not bad else f"NOT LINEARIZABLE on keys {', '.join(bad)}"))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
