#!/usr/bin/env python3
"""Writes docs/benchmarks.md and docs/benchmarks/*.png from a results directory
of bench/compare/run.sh.

    python3 bench/compare/report.py RESULTS_DIR [--md FILE] [--png-dir DIR]

RESULTS_DIR holds one bench/compare/SCHEMA.md JSON file per step (or a
directory of them for the peer scripts), steps.tsv (what run.sh ran, how
each step ended, its repetition and the machine's load before it),
commands.txt and machine.txt. Repeated steps (ids ending in _r1, _r2, ...)
of one system, transport and point are merged into their median; every
repetition's number stays listed with its load. The "## Analysis" section is
copied from bench/compare/analysis.md when that file exists, so regenerating
the report keeps it. Needs python3 and matplotlib only.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import re
import statistics
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
except ImportError:  # --sections-only needs none of it
    matplotlib = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Targets of the project (docs/benchmarks.md "Targets").
LATENCY_TARGET = 1.2   # librpc udp p50 <= 1.2 x raw UDP ping-pong p50
RATE_VS_RAW = 0.7      # librpc best-window rps >= 0.7 x raw udp_echo at that window
RATE_VS_GRPC = 20.0    # ... and >= 20 x the best gRPC configuration
GOODPUT_TARGET = 0.6   # librpc 8 MiB goodput >= 0.6 x raw udp_stream
GOODPUT_TARGET_SIZE = 8 << 20
# The engine's cost over the medium (issue 30).
INSTR_TARGET = 1000    # instructions per 32-byte RPC < 1000 (function-pointer continuations)
API_COST_SPREAD = 0.10 # closure and coroutine continuations within 10% of it
UDP_GSO_DEFAULT = 0.6  # default-config 8 MiB goodput >= 0.6 x udp_stream --offload on
IPERF3_GOODPUT = 1.0   # ... and >= 1.0 x iperf3 (kernel TCP, its default config)
FABRIC_TCP_GOODPUT = 0.9  # fabric tcp;ofi_rxm 8 MiB >= 0.9 x UCX tcp
APP_MEMORY_GOODPUT = 1.0  # 1 MiB reads served from registered application memory >= 1.0 x copying
# Against the peers (issue 10): librpc / peer, same transport, 8 MiB goodput
# at least, 32 B p50 round trip at most.
PEER_GOODPUT = 0.8     # fabric shm vs UCX sm
SOCKPERF_LATENCY = 1.1 # librpc udp p50 <= 1.1 x sockperf ping-pong p50
FI_SHM_LATENCY = 1.5   # librpc fabric shm p50 <= 1.5 x fi_pingpong -p shm round trip
# Same host (issue 29): librpc's samehost transport against UCX sm.
SAMEHOST_LATENCY = 1.0         # 32 B rtt p50 <= 1.0 x UCX sm ucp_am_lat round trip
SAMEHOST_LATENCY_STRETCH = 0.8 # ... stretch: <= 0.8 x
SAMEHOST_GOODPUT = 1.2         # 8 MiB, server reads every byte, >= 1.2 x UCX sm ucp_am_bw
SAMEHOST_RATE = 0.5            # 32 B requests/s (window 32) >= 0.5 x UCX sm one-way msg/s

# Transport labels of the udp goodput runs, which differ in offload.
UDP_GSO = "udp (GSO/GRO)"
UDP_PLAIN = "udp (no GSO/GRO)"
# large_rpc_tput --server-reads-all: its runs are a series of their own.
READS_ALL = "server reads all"
# large_rpc_tput --pool-reads / --app-memory: 1 MiB values served from a
# pool, copied into message buffers or sent as views of registered memory.
POOL_COPY = "1 MiB from a pool, copied"
APP_MEMORY = "1 MiB from a pool, application memory"


def default_session_credits():
    """librpc's default session credits, read from RpcConfig in the public
    header: a goodput run with others is a series of its own, labelled with
    them. Read, not copied: a copy here said 32 after the default became 64,
    and the report then found no default-config run at all."""
    path = os.path.join(ROOT, "include", "librpc", "config.h")
    with open(path) as f:
        m = re.search(r"^\s*size_t session_credits = (\d+);", f.read(), re.MULTILINE)
    if m is None:
        sys.exit(f"report.py: no `size_t session_credits = N;` in {path}")
    return int(m.group(1))


DEFAULT_CREDITS = default_session_credits()
# The raw stream's window (udp_stream --window-datagrams default), the
# credits librpc runs with for the like-for-like goodput target.
STREAM_WINDOW = 256
UDP_GSO_STREAM_WINDOW = f"{UDP_GSO}, {STREAM_WINDOW} credits"

BUSY_PCT = 15          # CPUs busier than this with other work before a step: flagged

NAMES = {
    "librpc": "librpc",
    "raw_udp": "raw UDP",
    "grpc_sync": "gRPC sync",
    "grpc_async": "gRPC async",
    "fi_pingpong": "libfabric fi_pingpong",
    "ucx": "UCX ucx_perftest",
    "sockperf": "sockperf",
    "iperf3": "iperf3",
    "qperf": "qperf",
}
COLORS = {"librpc": "tab:blue", "raw_udp": "tab:gray", "grpc_sync": "tab:red",
          "grpc_async": "tab:red", "sockperf": "tab:green", "fi_pingpong": "tab:orange",
          "ucx": "tab:purple", "iperf3": "tab:brown", "qperf": "tab:olive"}

# The main number of each workload: what repetitions are compared and
# summarised by.
PRIMARY = {"latency": "rtt_p50_us", "rate": "rps", "goodput": "gbps", "cpu": "instructions_per_rpc"}

# Rows the report expects, so that a missing one shows as failed / not run:
# (role, step id, system, transport, aliases of the transport).
EXPECTED = [
    ("lat32", "a1", "raw_udp", "udp", ()),
    ("lat32", "a8", "sockperf", "udp", ()),
    ("lat32", "a2", "librpc", "udp", ()),
    ("lat32", "a9", "librpc", "fabric shm", ()),
    ("lat32", "a3", "grpc_sync", "tcp", ()),
    ("lat32", "a4", "fi_pingpong", "udp", ()),
    ("lat32", "a4", "fi_pingpong", "shm", ()),
    ("lat32", "a4", "fi_pingpong", "tcp;ofi_rxm", ("tcp",)),
    ("lat32", "a5", "ucx", "tcp", ()),
    ("lat32", "a5", "ucx", "shm", ("posix", "sysv", "mm", "cma", "shm+self")),
]
# The latency rows' reference ("the limit of the path"), when not raw UDP:
# (system, transport) -> (system, transport, what).
LATENCY_REFERENCE = {("librpc", "fabric shm"): ("fi_pingpong", "shm", "fi_pingpong shm")}


# ---------------------------------------------------------------------------
# Loading


class Series:
    """One JSON result file: a system on a transport doing one workload."""

    def __init__(self, step, path, doc):
        self.step = step
        self.path = path
        self.system = normalise_system(doc.get("system", "?"))
        transport = doc.get("transport") or default_transport(self.system)
        self.setup = doc.get("setup", "")
        self.error = doc.get("error")
        # Schema 2 (SCHEMA.md): "run" metadata, the settings in "config",
        # the programs' "warnings"; schema-1 files had the settings at the
        # top level and none of the rest.
        self.schema = doc.get("schema_version", 1)
        self.run = doc.get("run") or {}
        self.warnings = list(doc.get("warnings") or [])
        settings = {**doc, **(doc.get("config") or {})}
        if "results" in doc:
            self.results = list(doc["results"] or [])
        else:  # a flat object: one point with the fields at the top level
            self.results = [{k: v for k, v in doc.items()
                             if k not in ("system", "transport", "workload", "setup")}]
        self.results = [upgrade_point(p) for p in self.results]
        self.workload = doc.get("workload") or infer_workload(self.results) or step["workload"]
        if self.system == "?" and self.workload == "cpu":
            self.system = "librpc"  # scripts/cpu_cost.sh measures librpc only
            transport = "udp"  # over udp on 127.0.0.1
        # What the numbers are used for: the latency sweep is its own kind, so
        # its 32 B point does not mix with the 32 B latency runs.
        # The same-host section's runs are kinds of their own ("samehost_"
        # + workload), so that they do not merge with sections a-c's.
        self.kind = "sweep" if step["role"] == "sweep" else \
            "soak" if step["role"] == "soak" else \
            "samehost_soak" if step["role"] == "samehost_soak" else \
            f"samehost_{self.workload}" if step["role"] == "samehost" else \
            "lat32" if self.workload == "latency" else self.workload
        self.transport = transport_label(self.system, transport, settings, self.results, self.kind)
        if settings.get("server_reads_all"):
            self.transport += f", {READS_ALL}"
        if settings.get("app_memory"):
            self.transport += f", {APP_MEMORY}"
        elif settings.get("pool_reads"):
            self.transport += f", {POOL_COPY}"
        # scripts/cpu_cost.sh runs once per continuation style (API=...):
        # each is a series of its own, not a repetition of the others.
        if self.workload == "cpu" and settings.get("api") not in (None, "fnptr"):
            self.transport += f", {settings['api']}"
        self.members = [self]  # the repetitions merged into this one (merge_repetitions)

    @property
    def name(self):
        return NAMES.get(self.system, self.system)


def transport_label(system, transport, doc, results, kind):
    """The transport as the report names it: librpc's fabric runs by their
    provider ("fabric shm"), and the udp goodput runs by whether they used
    UDP GSO/GRO (librpc: "udp_offload" of the file; the raw stream: its
    results' "offload"). Files from before these fields keep "udp"."""
    if transport == "fabric" and doc.get("fabric_provider"):
        return f"fabric {doc['fabric_provider']}"
    if transport != "udp":
        return transport
    if system == "librpc":
        offload = doc.get("udp_offload")
    elif system == "raw_udp" and kind == "goodput":
        offload = any(isinstance(r, dict) and r.get("offload") for r in results)
    else:
        return transport
    if offload is None:
        return transport
    if not offload:
        return UDP_PLAIN
    if kind != "goodput":
        return transport
    credits = doc.get("session_credits") if system == "librpc" else None
    if credits is not None and credits != DEFAULT_CREDITS:
        return f"{UDP_GSO}, {credits} credits"
    return UDP_GSO


# Schema 1's latency fields and their schema-2 names (round trips: rtt_*).
SCHEMA1_LATENCY = {"p50_us": "rtt_p50_us", "p90_us": "rtt_p90_us", "p99_us": "rtt_p99_us",
                   "p999_us": "rtt_p999_us", "max_us": "rtt_max_us", "min_us": "rtt_min_us",
                   "mean_us": "rtt_mean_us"}


def upgrade_point(p):
    """A result point with schema 2's names: schema 1's p50_us ... become
    rtt_p50_us ..., and its samples_us (a sorted sample of at most 1000
    round trips) becomes rtt_cdf, [value_us, quantile] pairs."""
    if not isinstance(p, dict):
        return p
    p = dict(p)
    for old, new in SCHEMA1_LATENCY.items():
        if old in p and new not in p:
            p[new] = p.pop(old)
    samples = p.pop("samples_us", None)
    if samples and "rtt_cdf" not in p:
        samples = sorted(samples)
        p["rtt_cdf"] = [[v, (i + 1) / len(samples)] for i, v in enumerate(samples)]
    return p


def normalise_system(system):
    return "raw_udp" if system.startswith("raw_udp") else system


def default_transport(system):
    return {"raw_udp": "udp", "librpc": "udp", "grpc_sync": "tcp",
            "grpc_async": "tcp"}.get(system, "?")


def infer_workload(results):
    if not results:
        return None
    keys = results[0].keys()
    if "rtt_p50_us" in keys:
        return "latency"
    if "rps" in keys:
        return "rate"
    if "gbps" in keys:
        return "goodput"
    if "instructions_per_rpc" in keys:
        return "cpu"
    return None


def read_steps(results_dir):
    path = os.path.join(results_dir, "steps.tsv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        steps = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for st in steps:  # results of run.sh before repetitions lack these columns
        st["rep"] = st.get("rep") or ""
        st["load1"] = st.get("load1") or ""
        st["busy_pct"] = st.get("busy_pct") or ""
    return steps


def output_files(results_dir, step):
    out = step.get("output") or ""
    if not os.path.isabs(out):
        # run.sh records paths relative to the repository root.
        candidate = os.path.join(ROOT, out)
        out = candidate if os.path.exists(candidate) else \
            os.path.join(results_dir, os.path.basename(out))
    if os.path.isdir(out):
        return sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".json"))
    return [out] if out.endswith(".json") and os.path.exists(out) else []


def load(results_dir):
    """Returns (steps, series): every step of steps.tsv, and the parsed
    results of each. A step whose JSON cannot be used becomes failed."""
    steps = read_steps(results_dir)
    series = []
    for step in steps:
        step["reason"] = step.get("reason") or ""
        if step["role"] == "setup":
            continue
        for path in output_files(results_dir, step):
            try:
                with open(path) as f:
                    doc = json.load(f)
                s = Series(step, path, doc)
            except (OSError, ValueError, AttributeError, TypeError) as e:
                mark_failed(step, f"unreadable JSON {os.path.basename(path)}: {e}")
                continue
            if s.error:
                continue  # a wrapper's record of a failed sub-run: shown by expected_rows
            if not s.results:
                mark_failed(step, f"{os.path.basename(path)} has no results")
                continue
            series.append(s)
    return steps, merge_repetitions(series)


def point_key(p):
    return (p.get("size"), p.get("window"))


def merge_repetitions(series):
    """One Series per (kind, system, transport): the points of its
    repetitions merged by size and window. A merged point's numbers are the
    medians over the repetitions; its other fields (rtt_cdf, flags) come
    from the repetition whose main number is the median (the lower one of
    two); "_reps" lists every repetition's point with its step."""
    groups = {}
    for s in series:
        groups.setdefault((s.kind, s.system, s.transport), []).append(s)
    merged = []
    for members in groups.values():
        base = members[0]
        primary = PRIMARY.get(base.workload)
        entries = {}
        for s in members:
            for p in s.results:
                if isinstance(p, dict):
                    entries.setdefault(point_key(p), []).append((s, p))
        base.results = [merge_point(e, primary) for e in entries.values()]
        base.members = members
        merged.append(base)
    return merged


def merge_point(entries, primary):
    def value(entry):
        v = entry[1].get(primary)
        return v if is_number(v) else float("inf")
    ranked = sorted(entries, key=value)
    point = dict(ranked[(len(ranked) - 1) // 2][1])
    for key in {k for _, p in entries for k, v in p.items() if is_number(v)} - {"size", "window"}:
        values = [p[key] for _, p in entries if is_number(p.get(key))]
        if values:
            m = statistics.median(values)
            point[key] = int(m) if all(isinstance(v, int) for v in values) and m == int(m) else m
    point["_reps"] = [{"rep": s.step.get("rep", ""), "step": s.step, "point": p} for s, p in entries]
    return point


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def mark_failed(step, reason):
    step["status"] = "failed"
    step["reason"] = "; ".join(r for r in (step["reason"], reason) if r)


def read_machine(results_dir):
    info = {}
    path = os.path.join(results_dir, "machine.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("=")
                info[key] = value
    if not info.get("cpu_model"):
        try:
            with open("/proc/cpuinfo") as f:
                info["cpu_model"] = next(l.split(":", 1)[1].strip() for l in f
                                         if l.startswith("model name"))
        except (OSError, StopIteration):
            info["cpu_model"] = platform.processor() or "?"
    info.setdefault("cores", str(os.cpu_count()))
    info.setdefault("kernel", " ".join(platform.uname()[i] for i in (0, 2, 4)))
    info.setdefault("date", datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"))
    return info


# ---------------------------------------------------------------------------
# Selection helpers


def find(series, kind, system, transport=None):
    """All points of `system` (optionally on `transport`) of `kind` (Series.kind)."""
    points = []
    for s in series:
        if s.kind == kind and s.system == system and \
                (transport is None or s.transport == transport):
            points.extend(r for r in s.results if isinstance(r, dict))
    return points


def first(series, kind, system, transport=None):
    for s in series:
        if s.kind == kind and s.system == system and \
                (transport is None or s.transport == transport):
            return s
    return None


def step_by_id(steps, step_id):
    """The step `step_id`, or for a repeated step (ids step_id_r1, ...) the
    first repetition that did not end well, else the first repetition."""
    exact = next((s for s in steps if s["id"] == step_id), None)
    if exact is not None:
        return exact
    repeated = [s for s in steps if re.fullmatch(re.escape(step_id) + r"_r\d+", s["id"])]
    return next((s for s in repeated if s["status"] != "ok"), repeated[0] if repeated else None)


def status_text(step, missing_what="no result"):
    """Why a row has no number: "failed: ...", "not run: ..."."""
    if step is None:
        return "not run: step missing from this run"
    where = f" (repetition {step['rep']})" if step.get("rep") else ""
    if step["status"] == "not_run":
        return f"not run{where}: {step['reason'] or 'skipped'}"
    if step["status"] == "failed":
        return f"failed{where}: {step['reason'] or 'see ' + step['id'] + '.log'}"
    return f"failed: {missing_what} (see {step['id']}.log)"


def by_window(points):
    return {int(p["window"]): p for p in points if "window" in p and p.get("rps") is not None}


def p50_at(points, size):
    return next((p for p in points if int(p.get("size", -1)) == size), None)


# ---------------------------------------------------------------------------
# Formatting


def fmt_us(x):
    if x is None:
        return "—"
    return f"{x:.1f} µs" if x >= 100 else f"{x:.2f} µs"


def fmt_rate(x):
    if x is None:
        return "—"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M req/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k req/s"
    return f"{x:.0f} req/s"


def fmt_gbps(x):
    return "—" if x is None else f"{x:.2f} Gbit/s"


def fmt_ratio(x, what=""):
    return "—" if x is None else f"{x:.2f}× {what}".rstrip()


def fmt_num(x):
    return "—" if x is None else f"{x:.2f}" if isinstance(x, float) else str(x)


def fmt_size(n):
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Summary table


def lat32_p50(series, system, transport=None):
    s = first(series, "lat32", system, transport)
    return (p50_at(s.results, 32) or s.results[0]).get("rtt_p50_us") if s else None


def latency_rows(steps, series):
    rows, seen = [], set()
    for _, step_id, system, transport, aliases in EXPECTED:
        matches = [s for s in series if s.kind == "lat32" and s.system == system and
                   (s.transport == transport or s.transport in aliases)]
        step = step_by_id(steps, step_id)
        if not matches:
            rows.append([NAMES[system], transport, "latency", "32 B, 1 outstanding",
                         status_text(step, f"no {transport} result"), "—"])
        for s in matches:
            seen.add(id(s))
            rows.append(latency_row(series, s))
    for s in series:  # anything the wrappers measured beyond the expected rows
        if s.kind == "lat32" and id(s) not in seen:
            rows.append(latency_row(series, s))
    return rows


def latency_row(series, s):
    p = p50_at(s.results, 32) or s.results[0]
    if s.system == "fi_pingpong":  # reports a mean only; its wrapper stores it as rtt_p50_us
        text = f"mean {fmt_us(p.get('rtt_p50_us'))} (no percentiles)"
    else:
        text = f"rtt p50 {fmt_us(p.get('rtt_p50_us'))}{spread_text(p, 'rtt_p50_us', fmt_us)}"
        if p.get("rtt_p99_us") is not None:
            text += f", rtt p99 {fmt_us(p.get('rtt_p99_us'))}"
    ref_system, ref_transport, ref_what = LATENCY_REFERENCE.get(
        (s.system, s.transport), ("raw_udp", None, "raw UDP p50"))
    limit = "1.00× (the limit)" if s.system == "raw_udp" else \
        fmt_ratio(ratio(p.get("rtt_p50_us"), lat32_p50(series, ref_system, ref_transport)), ref_what)
    return [s.name, s.transport, "latency", f"{fmt_size(p.get('size', 32))}, 1 outstanding",
            text + reps_note(p), limit]


def rep_values(p, key):
    """The values of `key` in each repetition merged into point p."""
    return [r["point"][key] for r in p.get("_reps") or []
            if isinstance(r.get("point"), dict) and is_number(r["point"].get(key))]


def spread_text(p, key, fmt):
    """" (runs 9.8–11.0 µs)": the lowest and highest of the repetitions,
    so that a median of a few runs shows how far they were apart."""
    values = rep_values(p, key)
    if len(values) < 2:
        return ""
    return f" (runs {fmt(min(values))}–{fmt(max(values))})"


def reps_note(p):
    """", median of 3" for a point merged from repetitions; ", 1 of 3
    repetitions" where some of the run's repetitions have no result."""
    n = len([r for r in p.get("_reps") or [] if r["rep"]])
    if n and n < RUN_REPS:
        return f", {'median of ' if n > 1 else ''}{n} of {RUN_REPS} repetitions"
    return f", median of {n}" if n > 1 else ""


# The number of repetitions of the run (the highest in steps.tsv); set by main().
RUN_REPS = 1


def rate_rows(steps, series):
    raw = by_window(find(series, "rate", "raw_udp"))
    rows = []
    for system, prefix in (("raw_udp", "b1"), ("librpc", "b2"), ("grpc_async", "b3")):
        points = by_window(find(series, "rate", system))
        found = first(series, "rate", system)
        transport = found.transport if found else default_transport(system)
        windows = sorted(set(points) | {1, 8, 32, 128})
        for w in windows:
            p = points.get(w)
            if p is None:
                step = step_by_id(steps, f"{prefix}_w{w}") or step_by_id(steps, prefix)
                rows.append([NAMES[system], transport, "rate", f"32 B, window {w}",
                             status_text(step, f"no window {w} result"), "—"])
                continue
            limit = "1.00× (the limit)" if system == "raw_udp" else fmt_ratio(
                ratio(p["rps"], raw.get(w, {}).get("rps")), f"raw UDP echo, window {w}")
            rows.append([NAMES[system], transport, "rate", f"{fmt_size(p.get('size', 32))}, window {w}",
                         fmt_rate(p["rps"]), limit])
    for s in series:  # the peers' own rate tests (ucx_perftest: a one-way stream)
        if s.kind == "rate" and s.system not in ("raw_udp", "librpc", "grpc_async"):
            for p in s.results:
                point = f"{fmt_size(p.get('size', 32))}, " + \
                    (f"window {p['window']}" if "window" in p else "one-way stream, no responses")
                limit = fmt_ratio(ratio(p.get("rps"), raw.get(p["window"], {}).get("rps")),
                                  f"raw UDP echo, window {p['window']}") if "window" in p else \
                    "— (messages, not RPCs)"
                rows.append([s.name, s.transport, "rate", point,
                             fmt_rate(p.get("rps")).replace("req/s", "msg/s"), limit])
    return rows


def goodput_rows(steps, series):
    """The raw UDP streams (the limits of the udp path, without and with
    GSO/GRO), librpc over udp at every size, then every 8 MiB run: librpc's
    other transports next to their peers, and the kernel TCP tools."""
    rows = []
    streams = {t: goodput_at(series, "raw_udp", t) for t in (UDP_PLAIN, UDP_GSO)}
    for transport, step_id in ((UDP_PLAIN, "c1"), (UDP_GSO, "c3")):
        p = streams[transport]
        if p is None:
            rows.append(["raw UDP", transport, "goodput", "1472 B datagrams",
                         status_text(step_by_id(steps, step_id)), "—"])
        else:
            rows.append(["raw UDP", transport, "goodput",
                         f"{fmt_size(p.get('size', 1472))} datagrams",
                         fmt_gbps(p.get("gbps")) + reps_note(p), "1.00× (the limit)"])
    limit = streams[UDP_GSO] or {}
    librpc = sorted(find(series, "goodput", "librpc", UDP_GSO) or
                    find(series, "goodput", "librpc", "udp"), key=lambda p: int(p.get("size", 0)))
    if not librpc:
        rows.append(["librpc", UDP_GSO, "goodput", "4 KiB .. 8 MiB",
                     status_text(step_by_id(steps, "c2")), "—"])
    for p in librpc:
        rows.append(["librpc", UDP_GSO, "goodput", f"{fmt_size(p['size'])} messages",
                     fmt_gbps(p.get("gbps")) + reps_note(p),
                     fmt_ratio(ratio(p.get("gbps"), limit.get("gbps")), "raw UDP stream (GSO/GRO)")])
    if librpc and not any(int(p["size"]) == GOODPUT_TARGET_SIZE for p in librpc):
        rows.append(["librpc", UDP_GSO, "goodput", "8 MiB messages",
                     status_text(step_by_id(steps, "c2"), "no 8 MiB result"), "—"])
    for system, transport, step_id, ref in GOODPUT_8MIB:
        p = goodput_at(series, system, transport)
        point = "TCP byte stream" if system in ("iperf3", "qperf") else "8 MiB messages"
        if p is None:
            rows.append([NAMES[system], transport, "goodput", point,
                         status_text(step_by_id(steps, step_id), f"no {transport} result"), "—"])
            continue
        if system in ("iperf3", "qperf"):
            point = f"TCP byte stream, {fmt_size(p.get('size', 0))} writes"
        vs = "—"
        if ref is not None:
            ref_point = goodput_at(series, ref[0], ref[1]) or {}
            vs = fmt_ratio(ratio(p.get("gbps"), ref_point.get("gbps")), ref[2])
        elif system in ("iperf3", "qperf"):
            vs = "— (kernel TCP, for reference)"
        rows.append([NAMES[system], transport, "goodput", point, fmt_gbps(p.get("gbps")) + reps_note(p),
                     vs])
    return rows


# The 8 MiB goodput runs besides librpc's udp sweep: (system, transport, step
# id, reference as (system, transport, what) or None).
GOODPUT_8MIB = [
    ("librpc", UDP_GSO_STREAM_WINDOW, "c10", ("raw_udp", UDP_GSO, "raw UDP stream (GSO/GRO)")),
    ("librpc", UDP_PLAIN, "c4", ("raw_udp", UDP_PLAIN, "raw UDP stream (no GSO/GRO)")),
    ("librpc", "fabric shm", "c5", ("ucx", "shm", "UCX sm")),
    ("ucx", "shm", "c6", None),
    ("librpc", "fabric tcp;ofi_rxm", "c7", ("ucx", "tcp", "UCX tcp")),
    ("ucx", "tcp", "c6", None),
    ("iperf3", "tcp", "c8", None),
    ("qperf", "tcp", "c9", None),
]


def goodput_at(series, system, transport, size=None):
    """The goodput point of system on transport: at `size`, or for the raw
    streams and the TCP tools (one point each) that point, else at 8 MiB."""
    points = find(series, "goodput", system, transport)
    if not points:
        return None
    if size is None and system in ("raw_udp", "iperf3", "qperf"):
        return points[0]
    size = size or GOODPUT_TARGET_SIZE
    return next((p for p in points if int(p.get("size", -1)) == size), None)


def cpu_rows(steps, series):
    rows = []
    for api, transport, step_id in (("function pointer", "udp", "d1"), ("closure", "udp, closure", "d2"),
                                    ("coroutine", "udp, coro", "d3")):
        s = first(series, "cpu", "librpc", transport)
        if s is None:
            rows.append(["librpc", "udp", "CPU cost", f"32 B RPC, {api} continuations",
                         status_text(step_by_id(steps, step_id)), "—"])
            continue
        p = s.results[0]
        rows.append(["librpc", "udp", "CPU cost",
                     f"{fmt_size(p.get('size', 32))} RPC, client + server, {api} continuations",
                     f"{p.get('instructions_per_rpc')} instructions/RPC in librpc.so, "
                     f"{p.get('with_program', '?')} with the program",
                     f"target < {INSTR_TARGET}" if step_id == "d1" else
                     f"target ≤ {1 + API_COST_SPREAD:.2f}× the function pointer's"])
    return rows


# ---------------------------------------------------------------------------
# Targets


def targets(steps, series):
    """Rows of the targets table: [target, measured ratio, verdict, numbers]."""
    lat = lambda system, transport=None: lat32_point(series, system, transport)
    gp = lambda system, transport: goodput_at(series, system, transport)
    rows = [ratio_target(f"librpc udp p50 latency ≤ {LATENCY_TARGET} × raw UDP p50 (32 B)",
                         lat("librpc", "udp"), lat("raw_udp"), "rtt_p50_us", fmt_us, LATENCY_TARGET,
                         at_most=True, steps=steps, step_ids=("a2", "a1")),
            ratio_target(f"librpc udp p50 latency ≤ {SOCKPERF_LATENCY} × sockperf ping-pong p50 "
                         "(32 B, UDP, busy-poll)",
                         lat("librpc", "udp"), lat("sockperf", "udp"), "rtt_p50_us", fmt_us,
                         SOCKPERF_LATENCY, at_most=True, steps=steps, step_ids=("a2", "a8")),
            ratio_target(f"librpc fabric shm p50 latency ≤ {FI_SHM_LATENCY} × fi_pingpong -p shm "
                         "round trip (32 B; fi_pingpong's is a mean)",
                         lat("librpc", "fabric shm"), lat("fi_pingpong", "shm"), "rtt_p50_us", fmt_us,
                         FI_SHM_LATENCY, at_most=True, steps=steps, step_ids=("a9", "a4"))]
    rows += rate_targets(steps, series)
    rows.append(ratio_target(f"librpc 8 MiB goodput over udp ≥ {GOODPUT_TARGET} × raw UDP stream "
                             "(no GSO/GRO)",
                             gp("librpc", UDP_GSO) or gp("librpc", "udp"), gp("raw_udp", UDP_PLAIN),
                             "gbps", fmt_gbps, GOODPUT_TARGET, at_most=False, steps=steps,
                             step_ids=("c2", "c1")))
    # Issue 30: the default config (a user does not tune credits first)
    # against the raw stream with GSO/GRO and against kernel TCP; the
    # like-for-like run at the stream's window, and 64 KiB and 1 MiB, go
    # next to it.
    default = gp("librpc", UDP_GSO) or gp("librpc", "udp")
    udp = ratio_target(f"librpc 8 MiB goodput over udp, default config, ≥ {UDP_GSO_DEFAULT} × raw "
                       f"UDP stream with GSO/GRO (`udp_stream --offload on`, window {STREAM_WINDOW})",
                       default, gp("raw_udp", UDP_GSO), "gbps", fmt_gbps, UDP_GSO_DEFAULT,
                       at_most=False, steps=steps, step_ids=("c2", "c3"))
    stream = gp("raw_udp", UDP_GSO) or {}
    sizes = [(size, goodput_at(series, "librpc", UDP_GSO, size)) for size in (64 << 10, 1 << 20)]
    sizes = [(size, p) for size, p in sizes if p and p.get("gbps")]
    if sizes and stream.get("gbps"):
        udp[3] += "; " + ", ".join(
            f"{fmt_size(size)} {fmt_gbps(p['gbps'])} ({fmt_ratio(ratio(p['gbps'], stream['gbps']))})"
            for size, p in sizes)
    like = gp("librpc", UDP_GSO_STREAM_WINDOW) or {}
    if like.get("gbps") and stream.get("gbps"):
        udp[3] += (f"; at the stream's window (`--credits {STREAM_WINDOW}`) "
                   f"{fmt_gbps(like['gbps'])} ({fmt_ratio(ratio(like['gbps'], stream['gbps']))})")
    rows.append(udp)
    tcp = ratio_target(f"librpc 8 MiB goodput over udp, default config, ≥ {IPERF3_GOODPUT} × "
                       "iperf3 (kernel TCP, its default config)",
                       default, gp("iperf3", "tcp"), "gbps", fmt_gbps, IPERF3_GOODPUT,
                       at_most=False, steps=steps, step_ids=("c2", "c8"))
    qperf = gp("qperf", "tcp") or {}
    if default and default.get("gbps") and qperf.get("gbps"):
        tcp[3] += (f"; qperf tcp_bw {fmt_gbps(qperf['gbps'])} (librpc "
                   f"{fmt_ratio(ratio(default['gbps'], qperf['gbps']))} of it)")
    rows.append(tcp)
    rows.append(ratio_target(f"librpc 8 MiB goodput over fabric shm ≥ {PEER_GOODPUT} × UCX sm "
                             "(ucp_am_bw)",
                             gp("librpc", "fabric shm"), gp("ucx", "shm"), "gbps", fmt_gbps,
                             PEER_GOODPUT, at_most=False, steps=steps, step_ids=("c5", "c6")))
    rows.append(ratio_target(f"librpc 8 MiB goodput over fabric tcp;ofi_rxm ≥ {FABRIC_TCP_GOODPUT} × "
                             "UCX tcp (ucp_am_bw)",
                             gp("librpc", "fabric tcp;ofi_rxm"), gp("ucx", "tcp"), "gbps", fmt_gbps,
                             FABRIC_TCP_GOODPUT, at_most=False, steps=steps, step_ids=("c7", "c6")))
    rows.append(soak_target(steps, series))
    rows.append(cpu_target(steps, series))
    rows.append(api_cost_target(steps, series))
    app = first(series, "samehost_goodput", "librpc", f"samehost, {APP_MEMORY}")
    copy = first(series, "samehost_goodput", "librpc", f"samehost, {POOL_COPY}")
    rows.append(ratio_target(f"serving 1 MiB reads from registered application memory ≥ "
                             f"{APP_MEMORY_GOODPUT} × copying them into message buffers "
                             "(samehost, two processes)",
                             app.results[0] if app and app.results else None,
                             copy.results[0] if copy and copy.results else None, "gbps",
                             fmt_gbps, APP_MEMORY_GOODPUT, at_most=False, steps=steps,
                             step_ids=("f14_r1", "f13_r1")))
    return rows


def soak_target(steps, series):
    """Spurious retransmissions in the long 8 MiB run over fabric shm (step e1)."""
    what = "no spurious retransmission in a 10 s 8 MiB run over fabric shm"
    s = first(series, "soak", "librpc")
    p = s.results[0] if s and s.results else {}
    spurious = p.get("spurious_retransmissions")
    if spurious is None:
        return [what, "—", "not measured", missing_why(steps, [("e1", None)])]
    step = step_by_id(steps, "e1") or {}
    numbers = (f"{spurious} spurious of {p.get('retransmissions', '?')} retransmissions, "
               f"{fmt_gbps(p.get('gbps'))}")
    if step.get("busy_pct"):
        numbers += f"; CPUs {step['busy_pct']}% busy with other work before the run"
    return [what, f"{spurious} spurious", verdict(spurious == 0), numbers]


def lat32_point(series, system, transport=None):
    s = first(series, "lat32", system, transport)
    return (p50_at(s.results, 32) or s.results[0]) if s else None


def ratio_target(what, mine, theirs, key, fmt, limit, at_most, steps, step_ids):
    """A target "mine / theirs <= limit" (at_most) or ">= limit" on the
    merged points' `key`, with the ratio of each repetition where both ran."""
    a = mine.get(key) if mine else None
    b = theirs.get(key) if theirs else None
    if a is None or not b:
        return [what, "—", "not measured",
                missing_why(steps, [(step_ids[0], a), (step_ids[1], b or None)])]
    r = a / b
    ok = r <= limit if at_most else r >= limit
    na, nb = (len([r for r in p.get("_reps") or [] if r["rep"]]) for p in (mine, theirs))
    numbers = f"{fmt(a)} vs {fmt(b)}"
    if na == nb and na > 1:
        numbers += f" (medians of {na} repetitions)"
    elif max(na, nb) > 1:
        numbers += f" (medians of {na} and {nb} repetitions)"
    paired = paired_ratios(mine, theirs, key)
    if len(paired) > 1:
        numbers += "; per repetition " + ", ".join(f"{x:.2f}×" for x in paired) + \
            f" (median {statistics.median(paired):.2f}×)"
    numbers += f"; target {'≤' if at_most else '≥'} {limit}×"
    return [what, target_ratio(r, limit, at_most), verdict(ok), numbers]


def paired_ratios(mine, theirs, key):
    """mine / theirs of each repetition both have, in repetition order."""
    def by_rep(p):
        return {r["rep"]: r["point"].get(key) for r in p.get("_reps") or [] if r["rep"]}
    a, b = by_rep(mine), by_rep(theirs)
    return [a[k] / b[k] for k in sorted(set(a) & set(b), key=int)
            if is_number(a[k]) and is_number(b[k]) and b[k]]


def target_ratio(r, limit, at_most):
    """The ratio with 2 decimals, or 3 where 2 would round it across the limit."""
    text = f"{r:.2f}"
    if (float(text) <= limit) != (r <= limit) or (float(text) >= limit) != (r >= limit):
        text = f"{r:.3f}"
    return f"{text}×"


def rate_targets(steps, series):
    lib = by_window(find(series, "rate", "librpc"))
    raw = by_window(find(series, "rate", "raw_udp"))
    grpc = [p for p in find(series, "rate", "grpc_async") + find(series, "rate", "grpc_sync")
            if p.get("rps") is not None]
    what_raw = f"librpc rate (1 client, 1 server thread, best window) ≥ {RATE_VS_RAW} × raw UDP echo at that window"
    what_grpc = f"librpc rate (best window) ≥ {RATE_VS_GRPC:.0f} × best gRPC configuration"
    if not lib:
        why = missing_why(steps, [("b2_w8", None)])
        return [[what_raw, "—", "not measured", why], [what_grpc, "—", "not measured", why]]
    w, best = max(lib.items(), key=lambda kv: kv[1]["rps"])
    rows = []
    if w in raw:
        r = best["rps"] / raw[w]["rps"]
        rows.append([what_raw, target_ratio(r, RATE_VS_RAW, False), verdict(r >= RATE_VS_RAW),
                     f"window {w}: {fmt_rate(best['rps'])} vs {fmt_rate(raw[w]['rps'])} "
                     f"(one run each); target ≥ {RATE_VS_RAW}×"])
    else:
        rows.append([what_raw, "—", "not measured", f"no raw UDP echo result at window {w}: " +
                     missing_why(steps, [(f"b1_w{w}", None)])])
    if grpc:
        g = max(grpc, key=lambda p: p["rps"])
        r = best["rps"] / g["rps"]
        rows.append([what_grpc, f"{r:.1f}×", verdict(r >= RATE_VS_GRPC),
                     f"{fmt_rate(best['rps'])} (window {w}) vs gRPC {fmt_rate(g['rps'])} "
                     f"(outstanding {g.get('window', '?')}); target ≥ {RATE_VS_GRPC:.0f}×"])
    else:
        rows.append([what_grpc, "—", "not measured", missing_why(steps, [("b3", None)])])
    return rows


def cpu_target(steps, series):
    what = f"instructions per 32-byte RPC < {INSTR_TARGET} (function-pointer continuations)"
    s = first(series, "cpu", "librpc", "udp")
    n = s.results[0].get("instructions_per_rpc") if s else None
    if n is None:
        return [what, "—", "not measured", missing_why(steps, [("d1", None)])]
    return [what, f"{n} instructions", verdict(n < INSTR_TARGET),
            f"client + server, librpc.so only, callgrind; target < {INSTR_TARGET}"]


def api_cost_target(steps, series):
    """Closure and coroutine continuations against the function pointer's,
    counting librpc and the program together (their inline code is the
    program's)."""
    what = (f"closure and coroutine continuations within {API_COST_SPREAD:.0%} of the "
            "function pointer's instructions per RPC")
    base = first(series, "cpu", "librpc", "udp")
    others = [(api, first(series, "cpu", "librpc", f"udp, {api}")) for api in ("closure", "coro")]
    b = base.results[0].get("with_program") if base else None
    got = [(api, s.results[0].get("with_program")) for api, s in others if s]
    if not b or len(got) < 2 or any(v is None for _, v in got):
        return [what, "—", "not measured", missing_why(steps, [("d1", b), ("d2", None), ("d3", None)])]
    worst = max(v / b for _, v in got)
    return [what, f"{worst:.2f}×", verdict(worst <= 1 + API_COST_SPREAD),
            f"librpc and program together: function pointer {b}, " +
            ", ".join(f"{api} {v} ({v / b:.2f}×)" for api, v in got) +
            f"; target ≤ {1 + API_COST_SPREAD:.2f}×"]


def verdict(ok):
    return "**met**" if ok else "**missed**"


def missing_why(steps, needed):
    """`needed`: (step id, value or None); explains the ones without a value."""
    reasons = []
    for step_id, value in needed:
        if value is None:
            step = step_by_id(steps, step_id)
            label = step["label"] if step else step_id
            reasons.append(f"{label}: {status_text(step)}")
    return "; ".join(reasons) or "no data"


# ---------------------------------------------------------------------------
# Same host (run.sh section f): librpc samehost vs UCX sm vs librpc over
# libfabric shm, every librpc run two processes.

# (kind, system, transport, step id) of every row, in table order.
SAMEHOST_ROWS = [
    ("samehost_latency", "librpc", "samehost", "f1"),
    ("samehost_latency", "ucx", "shm", "f2"),
    ("samehost_latency", "librpc", "fabric shm", "f3"),
    ("samehost_rate", "librpc", "samehost", "f4"),
    ("samehost_rate", "ucx", "shm", "f5"),
    ("samehost_rate", "librpc", "fabric shm", "f6"),
    ("samehost_goodput", "librpc", "samehost", "f7"),
    ("samehost_goodput", "librpc", f"samehost, {READS_ALL}", "f8"),
    ("samehost_goodput", "ucx", "shm", "f9"),
    ("samehost_goodput", "librpc", "fabric shm", "f10"),
    ("samehost_goodput", "librpc", f"fabric shm, {READS_ALL}", "f11"),
]
SAMEHOST_POINTS = {"samehost_latency": "32 B, 1 outstanding",
                   "samehost_rate": "32 B, 1 client + 1 server thread",
                   "samehost_goodput": "8 MiB messages"}


def samehost_point(series, kind, system, transport):
    """The point of a same-host row: 32 B latency, the rate point, 8 MiB."""
    s = first(series, kind, system, transport)
    if s is None:
        return None
    if kind == "samehost_latency":
        return p50_at(s.results, 32) or s.results[0]
    if kind == "samehost_goodput":
        return next((p for p in s.results if int(p.get("size", -1)) == GOODPUT_TARGET_SIZE), None)
    return s.results[0]


def samehost_result(kind, system, p):
    """A row's result cell: the median and the spread of the runs."""
    if kind == "samehost_latency":
        text = f"rtt p50 {fmt_us(p.get('rtt_p50_us'))}{spread_text(p, 'rtt_p50_us', fmt_us)}"
        if p.get("rtt_p99_us") is not None:
            text += f", rtt p99 {fmt_us(p.get('rtt_p99_us'))}"
    elif kind == "samehost_rate":
        text = fmt_rate(p.get("rps")) + spread_text(p, "rps", fmt_rate)
        if system == "ucx":
            text = text.replace("req/s", "msg/s") + " (one-way, no responses)"
        elif "window" in p:
            text += f", window {p['window']}"
    else:
        text = fmt_gbps(p.get("gbps")) + spread_text(p, "gbps", fmt_gbps)
    return text + reps_note(p)


def retransmissions_of(p):
    """The retransmissions of every run merged into p (None: not recorded)."""
    values = rep_values(p, "retransmissions") if p.get("_reps") else \
        [p["retransmissions"]] if is_number(p.get("retransmissions")) else []
    return sum(values) if values else None


def samehost_rows(steps, series):
    rows = []
    for kind, system, transport, step_id in SAMEHOST_ROWS:
        what = kind.replace("samehost_", "")
        point = SAMEHOST_POINTS[kind]
        p = samehost_point(series, kind, system, transport)
        if p is None:
            rows.append([NAMES[system], transport, what, point,
                         status_text(step_by_id(steps, step_id), f"no {transport} result"), "—",
                         "—"])
            continue
        key = PRIMARY[what]
        ucx = samehost_point(series, kind, "ucx", "shm") or {}
        vs = "1.00× (the peer)" if system == "ucx" else \
            fmt_ratio(ratio(p.get(key), ucx.get(key)), "UCX sm")
        retx = retransmissions_of(p)
        rows.append([NAMES[system], transport, what, point, samehost_result(kind, system, p), vs,
                     "—" if system == "ucx" else fmt_num(retx)])
    return rows


def samehost_targets(steps, series):
    """Rows of the same-host targets table, like targets()'s."""
    pt = lambda kind, system, transport: samehost_point(series, kind, system, transport)
    lat = ratio_target(f"librpc samehost 32 B rtt p50 ≤ {SAMEHOST_LATENCY} × UCX sm ucp_am_lat "
                       "round trip (2 × its one-way)",
                       pt("samehost_latency", "librpc", "samehost"),
                       pt("samehost_latency", "ucx", "shm"), "rtt_p50_us", fmt_us,
                       SAMEHOST_LATENCY, at_most=True, steps=steps, step_ids=("f1", "f2"))
    stretch = ratio_target(f"(stretch) librpc samehost 32 B rtt p50 ≤ {SAMEHOST_LATENCY_STRETCH} × "
                           "UCX sm ucp_am_lat round trip",
                           pt("samehost_latency", "librpc", "samehost"),
                           pt("samehost_latency", "ucx", "shm"), "rtt_p50_us", fmt_us,
                           SAMEHOST_LATENCY_STRETCH, at_most=True, steps=steps,
                           step_ids=("f1", "f2"))
    rate = ratio_target(f"librpc samehost 32 B requests/s (1 client, 1 server thread, window 32) "
                        f"≥ {SAMEHOST_RATE} × UCX sm ucp_am_bw 32 B one-way message rate",
                        pt("samehost_rate", "librpc", "samehost"), pt("samehost_rate", "ucx", "shm"),
                        "rps", fmt_rate, SAMEHOST_RATE, at_most=False, steps=steps,
                        step_ids=("f4", "f5"))
    goodput = ratio_target(f"librpc samehost 8 MiB goodput, server reads every byte, ≥ "
                           f"{SAMEHOST_GOODPUT} × UCX sm ucp_am_bw 8 MiB",
                           pt("samehost_goodput", "librpc", f"samehost, {READS_ALL}"),
                           pt("samehost_goodput", "ucx", "shm"), "gbps", fmt_gbps,
                           SAMEHOST_GOODPUT, at_most=False, steps=steps, step_ids=("f8", "f9"))
    ucx_rate = (pt("samehost_rate", "ucx", "shm") or {}).get("rps")
    if ucx_rate:  # UCX's is a one-way message rate
        rate[3] = rate[3].replace(f"vs {fmt_rate(ucx_rate)}",
                                  f"vs {fmt_rate(ucx_rate).replace('req/s', 'msg/s')} one-way")
    as_is = pt("samehost_goodput", "librpc", "samehost") or {}
    ucx = pt("samehost_goodput", "ucx", "shm") or {}
    if as_is.get("gbps") and ucx.get("gbps"):
        goodput[3] += (f"; as is (the handler reads 4 bytes) {fmt_gbps(as_is['gbps'])}, "
                       f"{fmt_ratio(ratio(as_is['gbps'], ucx['gbps']))}")
    return [lat, stretch, rate, goodput, samehost_retx_target(steps, series)]


def samehost_retx_target(steps, series):
    """No retransmission in the long samehost run (f12), nor in any other
    samehost run of the section: shared memory loses nothing, so any is a
    timer that fired too early."""
    what = "no retransmission in a 10 s 8 MiB librpc samehost run, nor in the section's other " \
        "samehost runs"
    s = first(series, "samehost_soak", "librpc")
    soak = s.results[0] if s and s.results else {}
    if not is_number(soak.get("retransmissions")):
        return [what, "—", "not measured", missing_why(steps, [("f12", None)])]
    others = []
    for kind, system, transport, step_id in SAMEHOST_ROWS:
        p = samehost_point(series, kind, system, transport) if system == "librpc" else None
        n = retransmissions_of(p) if p else None
        if n is not None and transport.startswith("samehost"):
            others.append((step_id, n))
    total = soak["retransmissions"] + sum(n for _, n in others)
    numbers = (f"{soak['retransmissions']} in {fmt_num(soak.get('duration_s'))} s at "
               f"{fmt_gbps(soak.get('gbps'))} (f12, {soak.get('messages', '?')} messages); "
               + ", ".join(f"{i}: {n}" for i, n in others))
    return [what, f"{total} retransmissions", verdict(total == 0), numbers]


def samehost_reps_table(series):
    """Every run of the section's rows, with the load before its step."""
    rows, nreps = [], 0
    for kind, system, transport, _ in SAMEHOST_ROWS:
        p = samehost_point(series, kind, system, transport)
        if p is None:
            continue
        key = PRIMARY[kind.replace("samehost_", "")]
        fmt = {"rtt_p50_us": fmt_us, "rps": fmt_rate, "gbps": fmt_gbps}[key]
        if system == "ucx" and key == "rps":
            fmt = lambda x: fmt_rate(x).replace("req/s", "msg/s")  # noqa: E731 (one-way)
        cells = {}
        for r in p.get("_reps") or []:
            if not r["rep"]:
                continue
            st = r["step"]
            retx = r["point"].get("retransmissions")
            cells[int(r["rep"])] = f"{fmt(r['point'].get(key))} (load {st.get('load1') or '?'}, " \
                f"{st.get('busy_pct') or '?'}% busy" + \
                (f", {retx} retx" if is_number(retx) and retx else "") + ")"
        if cells:
            nreps = max(nreps, max(cells))
            rows.append([NAMES[system], transport, kind.replace("samehost_", ""), cells,
                         fmt(p.get(key))])
    if not rows:
        return "_No repeated measurements._"
    header = ["System", "Transport", "Workload"] + \
        [f"Repetition {i}" for i in range(1, nreps + 1)] + ["Median"]
    return md_table(header, [r[:3] + [r[3].get(i, "—") for i in range(1, nreps + 1)] + [r[4]]
                             for r in rows])


def samehost_section(steps, series):
    """The "Same host" section of the page: its numbers, targets and runs."""
    return ["## Same host: librpc samehost, UCX sm, libfabric shm", "",
            "Two processes on this machine, server pinned to CPU 1 and client to CPU 0: "
            "librpc's programs in server and client mode (`bench/compare/pair.sh`), "
            "ucx_perftest with UCX_TLS=sm (`bench/peers/ucx_perf.sh`). Run interleaved, "
            "every system once per repetition; results are medians. UCX's rate is a one-way "
            "stream of 32 B messages (ucp_am_bw), librpc's a closed loop of 32 B requests with "
            "32 B responses, window 32. 8 MiB goodput: requests of 8 MiB, 32 B responses; "
            f"\"{READS_ALL}\" runs make the server's handler read (checksum) every request "
            "byte (`large_rpc_tput --server-reads-all`), the others read 4 bytes of it. "
            "Retransmissions: the sum over the repetitions.", "",
            md_table(["System", "Transport", "Workload", "Point", "Result", "vs UCX sm",
                      "Retransmissions"], samehost_rows(steps, series)), "",
            "### Same-host targets", "",
            md_table(["Target", "Measured ratio", "Verdict", "Numbers"],
                     samehost_targets(steps, series)), "",
            "### Same-host runs, each with the load before it", "",
            samehost_reps_table(series), ""]


# ---------------------------------------------------------------------------
# Plots


def pow2_formatter():
    return FuncFormatter(lambda v, _: fmt_size(v) if v >= 1 else f"{v:g}")


def cdf_points(p):
    """(values_us, quantiles) of a point's rtt_cdf, or of its percentiles
    when it has none (marked by the caller)."""
    cdf = p.get("rtt_cdf") or []
    pts = [(float(v), float(q)) for v, q in cdf if is_number(v) and is_number(q)]
    return [v for v, _ in pts], [q for _, q in pts]


def plot_latency_cdf(series, path):
    """The 32 B round-trip CDF and its tail (1 - CDF, log) down to 1e-5, so
    that p99.99 is on the plot. Every repetition is drawn thin; the one whose
    p50 is the median, thick."""
    curves = []
    for system, transport in (("librpc", "udp"), ("raw_udp", None), ("sockperf", None),
                              ("librpc", "fabric shm"), ("grpc_sync", None)):
        s = first(series, "lat32", system, transport)
        if s:
            curves.append(s)
    if not curves:
        return "no 32 B latency results"
    fig, (ax, tail) = plt.subplots(1, 2, figsize=(11, 4.2))
    lowest_tail = 1.0
    for s in curves:
        p = p50_at(s.results, 32) or s.results[0]
        color = "tab:cyan" if s.transport.startswith("fabric") else COLORS.get(s.system)
        label = f"{s.name} ({s.transport})"
        xs, ys = cdf_points(p)
        if xs:
            for r in p.get("_reps") or []:
                rx, ry = cdf_points(r.get("point") or {})
                if rx and r.get("point") is not p and len(p.get("_reps")) > 1:
                    ax.step(rx, ry, where="post", color=color, alpha=0.3, linewidth=0.8)
                    tx = [(x, 1 - y) for x, y in zip(rx, ry) if y < 1]
                    tail.step([x for x, _ in tx], [y for _, y in tx], where="post", color=color,
                              alpha=0.3, linewidth=0.8)
            n_reps = len(rep_values(p, "rtt_p50_us"))
            if n_reps > 1:
                label += f", {n_reps} runs"
            ax.step(xs, ys, where="post", color=color, label=label)
            tx = [(x, 1 - y) for x, y in zip(xs, ys) if y < 1]
            tail.step([x for x, _ in tx], [y for _, y in tx], where="post", color=color,
                      label=label)
            lowest_tail = min([lowest_tail] + [y for _, y in tx if y > 0])
        else:
            qs = [(q, p.get(k)) for q, k in ((0.5, "rtt_p50_us"), (0.9, "rtt_p90_us"),
                                              (0.99, "rtt_p99_us"), (0.999, "rtt_p999_us"),
                                              (0.9999, "rtt_p9999_us")) if p.get(k) is not None]
            xs, ys = [x for _, x in qs], [q for q, _ in qs]
            label += " (percentiles)"
            ax.plot(xs, ys, "o--", color=color, label=label)
            tail.plot(xs, [1 - y for y in ys], "o--", color=color, label=label)
            lowest_tail = min([lowest_tail] + [1 - y for y in ys if y < 1])
    for a in (ax, tail):
        a.set_xscale("log")
        a.set_xlabel("round-trip time (µs, log)")
        a.grid(True, which="both", alpha=0.3)
        a.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("fraction of round trips ≤ x")
    ax.set_ylim(0, 1.01)
    ax.set_title("32 B round-trip latency, CDF")
    tail.set_yscale("log")
    tail.set_ylim(min(5e-6, lowest_tail / 2), 1)
    for q, name in ((1e-2, "p99"), (1e-3, "p99.9"), (1e-4, "p99.99")):
        tail.axhline(q, color="gray", linewidth=0.6, linestyle=":")
        tail.annotate(name, (1, q), xycoords=("axes fraction", "data"), xytext=(-30, 2),
                      textcoords="offset points", fontsize=7, color="gray")
    tail.set_ylabel("fraction of round trips > x (log)")
    tail.set_title("tail (1 − CDF), to p99.99 and beyond")
    ax.legend(fontsize=8, loc="lower right")
    save(fig, path)
    return None


def plot_rate(series, path):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    lines = {}
    for system in ("raw_udp", "librpc", "grpc_async"):
        points = by_window(find(series, "rate", system))
        if points:
            lines[system] = {w: p["rps"] for w, p in points.items()}
    for system, style in (("raw_udp", "s--"), ("librpc", "o-"), ("grpc_async", "^-")):
        if system not in lines:
            continue
        ws = sorted(lines[system])
        ys = [lines[system][w] for w in ws]
        ax.plot(ws, ys, style, color=COLORS.get(system), label=NAMES[system])
        # The spread of the repetitions: a bar from the lowest to the highest.
        points = by_window(find(series, "rate", system))
        for w in ws:
            values = rep_values(points[w], "rps")
            if len(values) > 1:
                ax.vlines(w, min(values), max(values), color=COLORS.get(system), alpha=0.5,
                          linewidth=3)
        for w, y in zip(ws, ys):
            # A value with a higher one close above it is labelled below its
            # point, so labels of nearly equal rates do not overlap.
            crowded = any(y < o[w] < 1.6 * y for o in lines.values() if w in o)
            ax.annotate(fmt_rate(y).replace(" req/s", ""), (w, y), textcoords="offset points",
                        xytext=(0, -13 if crowded else 6), ha="center", fontsize=7,
                        color=COLORS.get(system))
    plotted = bool(lines)
    if not plotted:
        plt.close(fig)
        return "no rate results"
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4, 8, 16, 32, 64, 128])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_rate(v).replace(" req/s", "")))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.margins(y=0.12)  # room for the labels above the top points
    ax.set_xlabel("requests outstanding (window)")
    ax.set_ylabel("requests per second (log)")
    ax.set_title("32 B request rate, 1 client thread, 1 server thread")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)
    return None


def plot_goodput(series, path):
    lib = sorted((p for p in find(series, "goodput", "librpc", UDP_GSO) or
                  find(series, "goodput", "librpc", "udp") if p.get("gbps") is not None),
                 key=lambda p: int(p["size"]))
    streams = [(t, goodput_at(series, "raw_udp", t), style) for t, style in
               ((UDP_PLAIN, ":"), (UDP_GSO, "--"))]
    singles = [(f"{NAMES[system]} ({transport})", goodput_at(series, system, transport))
               for system, transport, _, _ in GOODPUT_8MIB]
    singles = [(label, p) for label, p in singles if p is not None and p.get("gbps")]
    if not lib and not any(p for _, p, _ in streams) and not singles:
        return "no goodput results"
    fig, ax = plt.subplots(figsize=(11, 5))
    if lib:
        ax.plot([int(p["size"]) for p in lib], [p["gbps"] for p in lib], "o-",
                color=COLORS["librpc"], label=f"librpc, {UDP_GSO}, every size")
    for transport, p, style in streams:
        if p and p.get("gbps"):
            ax.axhline(p["gbps"], color=COLORS["raw_udp"], linestyle=style,
                       label=f"raw UDP stream, {transport}, {fmt_size(p.get('size', 1472))} "
                             f"datagrams: {p['gbps']:.2f} Gbit/s")
    # The 8 MiB runs (and the TCP byte streams, drawn at 8 MiB too), spread
    # a little sideways so that equal values stay readable.
    markers = "sDv^P*Xh"
    for i, (label, p) in enumerate(singles):
        x = GOODPUT_TARGET_SIZE * (1.12 ** (i - (len(singles) - 1) / 2))
        system = label.split(" (")[0]
        color = next((COLORS[k] for k, v in NAMES.items() if v == system), "black")
        if label.startswith("librpc"):
            color = "tab:cyan"
        ax.plot([x], [p["gbps"]], markers[i % len(markers)], color=color, markersize=8,
                label=f"{label}, 8 MiB: {p['gbps']:.2f} Gbit/s" if "iperf3" not in label and
                "qperf" not in label else f"{label}, TCP stream: {p['gbps']:.2f} Gbit/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(pow2_formatter())
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size (request size; response is small)")
    ax.set_ylabel("goodput (Gbit/s of payload, log)")
    ax.set_title("Large-message goodput over loopback (medians)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    plt.setp(ax.get_xticklabels(), rotation=30)
    save(fig, path)
    return None


def plot_latency_size(series, path):
    lib = sorted(find(series, "sweep", "librpc"), key=lambda p: int(p["size"]))
    raw = sorted(find(series, "sweep", "raw_udp"), key=sweep_size)
    if not lib and not raw:
        return "no latency sweep results"
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, pts, color, marker in (("librpc (udp)", lib, COLORS["librpc"], "o"),
                                     ("raw UDP ping-pong", raw, COLORS["raw_udp"], "s")):
        if not pts:
            continue
        xs = [sweep_size(p) for p in pts]
        ax.plot(xs, [p.get("rtt_p50_us") for p in pts], marker + "-", color=color,
                label=f"{name} rtt p50")
        spreads = [rep_values(p, "rtt_p50_us") for p in pts]
        if any(len(v) > 1 for v in spreads):
            ax.fill_between(xs, [min(v) if v else p.get("rtt_p50_us") for v, p in zip(spreads, pts)],
                            [max(v) if v else p.get("rtt_p50_us") for v, p in zip(spreads, pts)],
                            color=color, alpha=0.2, label=f"{name} rtt p50, lowest–highest run")
        ax.plot(xs, [p.get("rtt_p99_us") for p in pts], marker + ":", color=color, alpha=0.6,
                label=f"{name} rtt p99")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(pow2_formatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("request = response size")
    ax.set_ylabel("round-trip time (µs, log)")
    ax.set_title("Round-trip latency vs size, 1 outstanding")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30)
    save(fig, path)
    return None


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------------------
# Detail tables


def latency_detail(series):
    rows = []
    for s in series:
        if s.kind != "lat32":
            continue
        for p in s.results:
            rows.append([s.name, s.transport, fmt_size(p.get("size", 0)), p.get("iters", "—"),
                         *(fmt_us(p.get(k)) for k in ("rtt_p50_us", "rtt_p90_us", "rtt_p99_us",
                                                      "rtt_p999_us", "rtt_p9999_us",
                                                      "rtt_max_us")),
                         spread_text(p, "rtt_p50_us", fmt_us).strip(" ()") or "—"])
    return md_table(["System", "Transport", "Size", "Iterations", "rtt p50", "rtt p90",
                     "rtt p99", "rtt p99.9", "rtt p99.99", "rtt max", "rtt p50 of each run"],
                    rows) if rows else "_No results._"


def warnings_detail(series):
    """The warnings the programs wrote into their files (schema 2), by run."""
    lines = []
    for s in series:
        for m in s.members:
            if m.warnings:
                label = m.step.get("label") or m.step.get("id", "")
                rep = f", repetition {m.step['rep']}" if m.step.get("rep") else ""
                lines.append(f"- {m.name} ({m.transport}), {label}{rep}: " + "; ".join(m.warnings))
    return "\n".join(lines) if lines else "_No warnings (or only schema-1 files, which had none)._"


def sweep_detail(series):
    lib = {int(p["size"]): p for p in find(series, "sweep", "librpc")}
    raw = {sweep_size(p): p for p in find(series, "sweep", "raw_udp")}
    if not lib and not raw:
        return "_No results._"
    rows = []
    for size in sorted(set(lib) | set(raw)):
        lp, rp = lib.get(size, {}), raw.get(size, {})
        rows.append([fmt_size(size), fmt_us(lp.get("rtt_p50_us")), fmt_us(lp.get("rtt_p99_us")),
                     fmt_us(rp.get("rtt_p50_us")), fmt_us(rp.get("rtt_p99_us")),
                     fmt_ratio(ratio(lp.get("rtt_p50_us"), rp.get("rtt_p50_us")))])
    return md_table(["Size", "librpc rtt p50", "librpc rtt p99", "raw UDP rtt p50",
                     "raw UDP rtt p99", "librpc / raw p50"], rows)


def sweep_size(p):
    """Raw UDP stands in for 64 KiB with its largest datagram, 65507 B."""
    return 65536 if int(p["size"]) == 65507 else int(p["size"])


def rate_detail(series):
    rows = []
    for s in series:
        if s.kind != "rate":
            continue
        for p in sorted(s.results, key=lambda p: p.get("window", 0)):
            rows.append([s.name, s.transport, p.get("window", "—"), p.get("batch", "—"),
                         p.get("client_threads", "—"), p.get("server_threads", "—"),
                         fmt_num(p.get("duration_s")), p.get("requests", "—"),
                         fmt_rate(p.get("rps")) if "window" in p else
                         fmt_rate(p.get("rps")).replace("req/s", "msg/s")])
    return md_table(["System", "Transport", "Window", "Batch", "Client threads", "Server threads",
                     "Seconds", "Requests", "Rate"], rows) if rows else "_No results._"


def setups(series):
    seen, lines = set(), []
    for s in series:
        key = (s.name, s.transport, s.setup)
        if s.setup and key not in seen:
            seen.add(key)
            lines.append(f"- {s.name} ({s.transport}, {s.workload}): {s.setup}")
    return "\n".join(lines) or "_None recorded._"


def steps_table(steps):
    rows = []
    for st in steps:
        status = {"ok": "ok", "failed": "**failed**", "not_run": "not run"}.get(st["status"], st["status"])
        rows.append([st["id"], st["label"], status, st.get("elapsed_s", ""), busy_text(st),
                     st.get("load1") or "", st["reason"] or ""])
    return md_table(["Step", "What", "Status", "Seconds", "CPU % busy with other work before",
                     "Load average (1 min) before", "Reason"], rows)


def busy_text(st):
    busy = st.get("busy_pct") or ""
    return f"**{busy}**" if busy.isdigit() and int(busy) > BUSY_PCT else busy


def repetition_loads(steps):
    """One row per repetition: its steps, their load averages and CPU busy."""
    reps = {}
    for st in steps:
        if st.get("rep"):
            reps.setdefault(st["rep"], []).append(st)
    rows = []
    for rep in sorted(reps, key=int):
        sts = reps[rep]
        loads = [float(st["load1"]) for st in sts if is_float(st.get("load1"))]
        busy = [int(st["busy_pct"]) for st in sts if (st.get("busy_pct") or "").isdigit()]
        bad = [st["id"] for st in sts if st["status"] != "ok"]
        seconds = sum(float(st["elapsed_s"]) for st in sts if is_float(st.get("elapsed_s")))
        rows.append([rep, len(sts), f"{seconds:.0f}",
                     f"{min(loads):.2f} – {max(loads):.2f}" if loads else "—",
                     f"{max(busy)}" if busy else "—", ", ".join(bad) or "none"])
    return rows


def is_float(text):
    try:
        float(text)
        return True
    except (TypeError, ValueError):
        return False


def repetitions_detail(series):
    """Every repeated point (32 B latency; goodput at 8 MiB and the streams),
    each repetition with the load before it, and the median."""
    rows, nreps = [], 0
    for s in series:
        if s.kind not in ("lat32", "goodput"):
            continue
        key = PRIMARY[s.workload]
        fmt = fmt_us if s.kind == "lat32" else fmt_gbps
        for p in sorted(s.results, key=lambda p: int(p.get("size") or 0)):
            reps = [r for r in p.get("_reps") or [] if r["rep"]]
            if len(reps) < 2:
                continue
            if s.kind == "goodput" and s.system not in ("raw_udp", "iperf3", "qperf") and \
                    int(p.get("size", 0)) != GOODPUT_TARGET_SIZE:
                continue
            cells = {}
            for r in reps:
                st = r["step"]
                cells[int(r["rep"])] = f"{fmt(r['point'].get(key))} (load {st.get('load1') or '?'}, " \
                    f"{st.get('busy_pct') or '?'}% busy)"
            nreps = max(nreps, max(cells))
            point = f"{fmt_size(p.get('size', 0))}" + \
                ((" mean" if s.system == "fi_pingpong" else " p50") if s.kind == "lat32" else "")
            rows.append([s.name, s.transport, point, cells, fmt(p.get(key))])
    if not rows:
        return "_No repeated measurements in this run._"
    header = ["System", "Transport", "Point"] + [f"Repetition {i}" for i in range(1, nreps + 1)] + \
        ["Median"]
    return md_table(header, [r[:3] + [r[3].get(i, "—") for i in range(1, nreps + 1)] + [r[4]]
                             for r in rows])


# ---------------------------------------------------------------------------
# The document


def analysis_text():
    path = os.path.join(ROOT, "bench", "compare", "analysis.md")
    if not os.path.exists(path):
        return ("_No analysis yet: write it in `bench/compare/analysis.md`; report.py copies "
                "that file here each time it regenerates this page._")
    with open(path) as f:
        text = f.read().strip()
    lines = text.splitlines()
    if lines and lines[0].strip().lower().lstrip("#").strip() == "analysis":
        text = "\n".join(lines[1:]).strip()
    return text


def sections_text():
    """Hand-run measurements with their own scripts (bench/sessions.sh, ...):
    every bench/compare/sections/*.md, in name order, copied as they are."""
    folder = os.path.join(ROOT, "bench", "compare", "sections")
    if not os.path.isdir(folder):
        return []
    parts = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".md"):
            with open(os.path.join(folder, name)) as f:
                parts += [f.read().strip(), ""]
    return parts


# The page's "Conventions" section: how to read every number on it.
CONVENTIONS = """## Conventions

- **Round trips, not one-way.** Every latency on this page is a round trip:
  request sent to response received, at the client. Result fields and
  column headers say so (`rtt_p50_us`, "rtt p50"). perftest
  (`ib_send_lat`), ucx_perftest and fabtests report one-way latency, half a
  round trip; their wrappers here double it.
- **Percentiles.** librpc's programs and the baselines record every round
  trip into a log-linear histogram (`tools/measure/histogram.h`: exact below
  256 ns, 128 linear sub-buckets per power of two above): a percentile is
  within 0.4% of the sample of its rank, min, max and mean are exact, and
  p99.9 and p99.99 are real percentiles, not extrapolations (p99.99 needs
  10,000 round trips or more to mean anything).
- **Files.** With `--json FILE` a program writes a schema-2 result file
  (`schema_version`, `system`, `transport`, `workload`, `setup`, `run`:
  git revision, host, kernel, CPUs, load average at start and end, command;
  `config`: the effective settings; `warnings`; `results`), with `--csv
  FILE` one row per result, the same field names.
  [bench/compare/SCHEMA.md](../bench/compare/SCHEMA.md) lists every field.
  Tables recorded before schema 2 (issue 14) use the old names, `p50_us`,
  `p99_us`, ... for the same round trips, and have no p99.99.
- **Warnings.** A program prints `  warning: ...` under numbers it does not
  trust, and lists them in the file's `warnings`: the machine was busy (right
  before or after the run, more other threads were runnable than the CPUs
  the run leaves free; not the 1-minute load average, which still counts a
  build that ended seconds before), the process was
  descheduled (involuntary context switches while it busy-polled), the
  client retransmitted (the tail includes RTO waits), or the largest sample
  is more than 1 ms above p99 (a preemption or a loss). Numbers with
  warnings are measurements of this machine at that moment, not of librpc
  alone.

"""


def has_samehost(steps):
    return any(st["role"].startswith("samehost") for st in steps)


def write_samehost_page(md_path, results_dir, machine, steps, series):
    """The page of a run of the same-host section alone (run.sh --sections
    f): that section, the machine, the steps and the commands."""
    rel_results = os.path.relpath(results_dir, ROOT)
    measured = [st for st in steps if st["role"] != "setup"]
    loads = [float(st["load1"]) for st in measured if is_float(st.get("load1"))]
    parts = ["# Benchmarks: the same-host section alone", "",
             f"Generated by `bash bench/compare/run.sh --sections samehost` into {rel_results} "
             "(regenerate with "
             f"`/usr/bin/python3 bench/compare/report.py {rel_results} --md FILE`); the "
             "other sections of docs/benchmarks.md did not run.", ""]
    if machine.get("quick") == "1":
        parts += ["> **Smoke run (`--quick`)**: every duration and iteration count was ~10× "
                  "shorter than the full run.", ""]
    parts += ["## Machine", "",
              f"- CPU: {machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores",
              f"- Kernel: {machine.get('kernel', '?')}",
              f"- Date: {machine.get('date', '?')}",
              f"- librpc: git {machine.get('git', '?')}, build {machine.get('buildtype', '?')}",
              f"- Load average at start / end: {machine.get('loadavg_start', '?')} / "
              f"{machine.get('loadavg_end', '?')}" +
              (f"; 1-minute load average before each step: {min(loads):.2f} – {max(loads):.2f}"
               if loads else ""), ""]
    parts += samehost_section(steps, series)
    parts += ["### Warnings the programs raised", "", warnings_detail(series), "",
              "### Setups, as each program reported them", "", setups(series), "",
              "## How this was produced", "", "### Steps", "", steps_table(steps), "",
              "### Commands, exactly as run (from the repository root)", "", "```",
              read_text(os.path.join(results_dir, "commands.txt")).rstrip(), "```", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(parts))


def write_markdown(md_path, png_dir, results_dir, machine, steps, series, plots):
    rel_png = os.path.relpath(png_dir, os.path.dirname(md_path))
    rel_results = os.path.relpath(results_dir, ROOT)
    build = step_by_id(steps, "build")
    parts = ["# Benchmarks: librpc against raw UDP, sockperf, kernel TCP, gRPC, libfabric and UCX", "",
             "<!-- Generated by bench/compare/report.py from " + rel_results +
             "; edit bench/compare/analysis.md for the Analysis section, not this file. -->", "",
             "Generated by `bash bench/compare/run.sh` "
             "(regenerate the page alone with "
             f"`/usr/bin/python3 bench/compare/report.py {rel_results}`). "
             "Every number is from one run on loopback (127.0.0.1) of the machine below; "
             "client and server share it. The 32 B latency and the goodput comparisons ran "
             f"interleaved, every system once per repetition, {machine.get('reps') or 'one'} "
             "repetitions one after another; their numbers are medians over the repetitions "
             "(see \"Repetitions and load\").", ""]
    if machine.get("quick") == "1":
        parts += ["> **Smoke run (`--quick`)**: every duration and iteration count was ~10× "
                  "shorter than the full run; the numbers only show that everything runs.", ""]
    if build and build["status"] == "failed":
        parts += [f"> **The build failed** ({build['reason']}); the run used the binaries "
                  "already in build/, which may be stale or missing.", ""]
    busy = machine.get("cpu_busy_before_pct", "")
    measured = [st for st in steps if st["role"] != "setup"]
    busy_steps = [f"{st['id']} ({st['busy_pct']}%)" for st in measured
                  if (st.get("busy_pct") or "").isdigit() and int(st["busy_pct"]) > BUSY_PCT]
    if len(busy_steps) == len(measured) and busy_steps:
        busy_list = f"every step ({len(busy_steps)})"
    elif len(busy_steps) > 12:
        busy_list = ", ".join(busy_steps[:12]) + f" and {len(busy_steps) - 12} more steps"
    else:
        busy_list = ", ".join(busy_steps)
    if busy_steps or (busy.isdigit() and int(busy) > BUSY_PCT):
        parts += ["> **The machine was not idle**: other processes kept its CPUs busy just "
                  "before " + (busy_list or "the measurements") +
                  ". Every program here busy-polls both cores, so those numbers are lower and "
                  "noisier than on a quiet machine.", ""]
    loads = [float(st["load1"]) for st in measured if is_float(st.get("load1"))]
    parts += [CONVENTIONS]
    parts += ["## Machine", "",
              f"- CPU: {machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores",
              f"- Kernel: {machine.get('kernel', '?')}" +
              (f" ({machine['os']})" if machine.get("os") else ""),
              f"- Date: {machine.get('date', '?')}",
              f"- librpc: git {machine.get('git', '?')}, build {machine.get('buildtype', '?')}",
              f"- CPU busy with other work just before measuring: {busy or '?'}%; "
              f"load average at start / end: {machine.get('loadavg_start', '?')} / "
              f"{machine.get('loadavg_end', '?')}" +
              (f"; 1-minute load average before each step: {min(loads):.2f} – {max(loads):.2f}"
               if loads else ""), ""]
    parts += ["## Summary", "",
              "Ratios are to the limit of the path: latency p50 / raw UDP ping-pong p50 "
              "(librpc over fabric shm: / fi_pingpong shm); rate / raw UDP echo at the same "
              "window; goodput / the raw UDP stream with the same offload (librpc over fabric: "
              "/ UCX on the same kind of transport). "
              "A latency ratio above 1 or a rate or goodput ratio below 1 is overhead.", "",
              md_table(["System", "Transport", "Workload", "Point", "Result", "vs limit of the path"],
                       latency_rows(steps, series) + rate_rows(steps, series) +
                       goodput_rows(steps, series) + cpu_rows(steps, series)), ""]
    parts += ["## Targets", "",
              "Ratios are librpc / the other system, from the medians; \"per repetition\" "
              "pairs the runs of the same repetition.", "",
              md_table(["Target", "Measured ratio", "Verdict", "Numbers"], targets(steps, series)),
              ""]
    if has_samehost(steps):
        parts += samehost_section(steps, series)
    parts += ["## Plots", ""]
    for title, name, missing in plots:
        parts += [f"### {title}", ""]
        parts += [f"_Not plotted: {missing}._" if missing else f"![{title}]({rel_png}/{name})", ""]
    parts += ["## Analysis", "", analysis_text(), ""]
    parts += sections_text()
    parts += ["## Details", "", "### Latency, 32 B", "", latency_detail(series), "",
              "### Latency vs size", "",
              "Raw UDP's 64 KiB point is a 65507-byte datagram, the largest UDP carries. "
              "librpc's sweep caps each size's run by time, so large sizes may have fewer "
              "round trips than asked.", "",
              sweep_detail(series), "", "### Rate", "", rate_detail(series), "",
              "### Repetitions and load", "",
              "The machine's load per repetition of the interleaved comparisons: the 1-minute "
              "load average and the share of the CPUs other work kept busy, each read just "
              "before a step (every benchmark busy-polls both cores, so a load above ~2 means "
              "other work competed with it).", "",
              md_table(["Repetition", "Steps", "Seconds", "Load average (1 min)",
                        "Max CPU % busy with other work", "Steps not ok"],
                       repetition_loads(steps)) if repetition_loads(steps) else
              "_No repetitions in this run._", "",
              "Each repeated measurement, with the load average and CPU busy share just before "
              "its step:", "", repetitions_detail(series), "",
              "### Warnings the programs raised", "",
              "Each program checks its own run (docs/benchmarks.md, \"Conventions\"): "
              "load, being descheduled, retransmissions, a largest sample far above p99.", "",
              warnings_detail(series), "",
              "### Setups, as each program reported them", "", setups(series), ""]
    parts += ["## How this was produced", "", "### Steps", "", steps_table(steps), "",
              "### Commands, exactly as run (from the repository root)", "", "```",
              read_text(os.path.join(results_dir, "commands.txt")).rstrip(), "```", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(parts))


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return "(commands.txt missing)"


def splice_sections(md_path):
    """Replaces the hand-run sections of an existing report (everything
    between the first of their headings and "## Details") with
    sections_text(), leaving the comparison's measurements as they were."""
    with open(md_path) as f:
        text = f.read()
    end = text.find("\n## Details\n")
    if end < 0:
        sys.exit(f"report.py: {md_path} has no '## Details' heading")
    headings = [p.splitlines()[0] for p in sections_text() if p.startswith("## ")]
    starts = [text.find("\n" + h + "\n") for h in headings]
    starts = [i for i in starts if 0 <= i < end]
    start = min(starts) if starts else end
    with open(md_path, "w") as f:
        f.write(text[:start + 1] + "\n".join(sections_text()) + text[end + 1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", nargs="?")
    ap.add_argument("--md", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--png-dir", default=os.path.join(ROOT, "docs", "benchmarks"))
    ap.add_argument("--sections-only", action="store_true",
                    help="only copy bench/compare/sections/*.md into the existing --md")
    args = ap.parse_args()
    if args.sections_only:
        splice_sections(args.md)
        print(f"report.py: copied the sections into {os.path.relpath(args.md)}")
        return
    if args.results_dir is None:
        ap.error("results_dir is required (or --sections-only)")
    results_dir = os.path.realpath(args.results_dir)  # "latest" is a symlink
    if not os.path.isdir(results_dir):
        sys.exit(f"report.py: {results_dir} is not a directory")
    steps, series = load(results_dir)
    global RUN_REPS
    RUN_REPS = max([int(st["rep"]) for st in steps if st["rep"].isdigit()] or [1])
    machine = read_machine(results_dir)
    if machine.get("sections") == "f":  # the same-host section alone: no plots
        write_samehost_page(args.md, results_dir, machine, steps, series)
        print(f"report.py: wrote {os.path.relpath(args.md)}")
        return
    if matplotlib is None:
        sys.exit("report.py: the full report needs matplotlib (apt-get install python3-matplotlib)")
    os.makedirs(args.png_dir, exist_ok=True)
    plots = []
    for title, name, fn in (("Latency CDF, 32 B", "latency_cdf.png", plot_latency_cdf),
                            ("Request rate vs window, 32 B", "rate_vs_window.png", plot_rate),
                            ("Goodput vs message size", "goodput_vs_size.png", plot_goodput),
                            ("Latency vs size", "latency_vs_size.png", plot_latency_size)):
        path = os.path.join(args.png_dir, name)
        missing = fn(series, path)
        if missing and os.path.exists(path):
            os.remove(path)  # a stale plot from an earlier run would mislead
        plots.append((title, name, missing))
    write_markdown(args.md, args.png_dir, results_dir, machine, steps, series, plots)
    print(f"report.py: wrote {os.path.relpath(args.md)} and {len(plots)} plots in "
          f"{os.path.relpath(args.png_dir)}")


if __name__ == "__main__":
    main()
