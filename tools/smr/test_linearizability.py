#!/usr/bin/env python3
"""Tests of the register linearizability checker (tools/smr/linearizability.py)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linearizability as lin  # noqa: E402


def rec(client, op, value, invoke, complete, outcome="ok", key="x"):
    return {"client": client, "op": op, "key": key, "value": value, "invoke_ns": invoke,
            "complete_ns": complete, "outcome": outcome, "index": 0}


def linearizable(records):
    return all(lin.check_history(records).values())


class RegisterHistories(unittest.TestCase):
    def test_sequential_writes_and_reads_pass(self):
        self.assertTrue(linearizable([
            rec(0, "read", None, 0, 1), rec(0, "write", "a", 2, 3), rec(1, "read", "a", 4, 5),
            rec(1, "write", "b", 6, 7), rec(0, "read", "b", 8, 9)]))

    def test_a_stale_read_after_a_completed_write_fails(self):
        self.assertFalse(linearizable([
            rec(0, "write", "a", 0, 1), rec(0, "write", "b", 2, 3), rec(1, "read", "a", 4, 5)]))

    def test_a_read_of_a_value_never_written_fails(self):
        self.assertFalse(linearizable([rec(0, "write", "a", 0, 1), rec(1, "read", "z", 2, 3)]))

    def test_a_read_concurrent_with_a_write_may_see_either_value(self):
        for seen in ("a", "b"):
            self.assertTrue(linearizable([
                rec(0, "write", "a", 0, 1), rec(0, "write", "b", 2, 10),
                rec(1, "read", seen, 3, 4)]))

    def test_reads_may_not_go_back_in_time(self):
        # Both reads overlap the write, but once one has seen the new value a
        # later read (started after it completed) may not see the old one.
        self.assertFalse(linearizable([
            rec(0, "write", "a", 0, 1), rec(0, "write", "b", 2, 20),
            rec(1, "read", "b", 3, 4), rec(2, "read", "a", 5, 6)]))

    def test_an_info_write_may_take_effect_late(self):
        self.assertTrue(linearizable([
            rec(0, "write", "a", 0, 1, outcome="info"), rec(1, "write", "b", 2, 3),
            rec(1, "read", "a", 10, 11)]))

    def test_an_info_write_may_never_take_effect(self):
        self.assertTrue(linearizable([
            rec(0, "write", "a", 0, 1, outcome="info"), rec(1, "read", None, 5, 6)]))

    def test_an_info_write_cannot_take_effect_before_it_was_invoked(self):
        self.assertFalse(linearizable([
            rec(1, "read", "a", 0, 1), rec(0, "write", "a", 5, 6, outcome="info")]))

    def test_failed_operations_are_ignored(self):
        self.assertTrue(linearizable([
            rec(0, "write", "a", 0, 1, outcome="fail"), rec(1, "read", None, 2, 3)]))
        self.assertFalse(linearizable([
            rec(0, "write", "a", 0, 1, outcome="fail"), rec(1, "read", "a", 2, 3)]))

    def test_keys_are_checked_independently(self):
        results = lin.check_history([
            rec(0, "write", "a", 0, 1, key="x"), rec(1, "read", "a", 2, 3, key="x"),
            rec(0, "write", "b", 0, 1, key="y"), rec(1, "read", None, 2, 3, key="y")])
        self.assertEqual(results, {"x": True, "y": False})

    def test_a_long_concurrent_history_is_decided_quickly(self):
        # 3 clients, 600 overlapping operations, each read seeing the latest
        # completed write: linearizable, and memoisation keeps it fast.
        records, t = [], 0
        last = None
        for i in range(200):
            records.append(rec(0, "write", f"v{i}", t, t + 5))
            records.append(rec(1, "read", last, t + 1, t + 3))
            records.append(rec(2, "read", f"v{i}", t + 4, t + 9))
            last = f"v{i}"
            t += 6
        self.assertTrue(linearizable(records))

    def test_bad_records_are_refused(self):
        with self.assertRaises(ValueError):
            lin.check_history([rec(0, "delete", None, 0, 1)])
        with self.assertRaises(ValueError):
            lin.check_history([rec(0, "read", None, 5, 1)])


if __name__ == "__main__":
    unittest.main()
