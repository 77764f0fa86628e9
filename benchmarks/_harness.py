"""Shared helpers of the benchmark scripts: clocks, interleaved timing, memory probes, tables.

Not part of the library and not an installed module: each script in
``benchmarks/`` puts this folder on ``sys.path`` and imports it.

Timing.  Every measurement reads two clocks around the same call: the wall
clock (``time.perf_counter``) and the process CPU clock
(``time.process_time``, the CPU time of *all* the process's threads).  On a
shared, loaded machine the CPU clock is the stable one: other processes do
not inflate it.  For single-threaded code (BM25 kernels, a single dense
query without BLAS threads) it equals the latency an idle machine would
show; for multi-threaded code (BLAS, OpenMP) it is the total work, which is
larger than the latency, so the scripts print both and say which they quote.
Systems are *interleaved* by pass: a pass runs one system over all its
queries in order, passes alternate between systems, and the figure kept
per query is the median over its passes (see ``interleaved``).

Memory.  Peak and retained memory are read from ``/proc/self/status``
(``VmHWM`` and ``VmRSS``) in a fresh child process per system: the child
makes its input, resets the high-water mark (``echo 5 >
/proc/self/clear_refs``), records its resident size, runs the step, and
reports the new high-water mark minus that baseline (the step's peak) and
the resident size after it, once freed heap pages are handed back with
``malloc_trim`` (what the step retained: the index).  Where ``clear_refs``
is not writable it falls back to ``resource.getrusage`` (``ru_maxrss``),
whose delta can only under-report a step that peaks below an earlier high.
RSS counts memory the allocator keeps after a free, and native allocations
(numba, BLAS, faiss) that ``tracemalloc`` cannot see, which is why it is
used here.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LookupEmbedder:
    """Query text -> its precomputed vector (float32, normalized): embedding costs a lookup."""

    def __init__(self, table: dict[str, np.ndarray], dim: int) -> None:
        self.table, self.dim = table, dim

    def embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        if kind != "query":
            raise ValueError("document vectors are precomputed in these benchmarks")
        return np.stack([self.table[t] for t in texts])


def ensure_irflow() -> None:
    """Make ``import irflow`` work from a clean clone (repository root on ``sys.path``)."""
    try:
        import irflow  # noqa: F401
    except ImportError:
        sys.path.insert(0, REPO)


# -- clocks -----------------------------------------------------------------------------


class Sample:
    """Per-item medians of one system: wall and CPU seconds, one entry per query (or batch)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def add(self, walls: Sequence[float], cpus: Sequence[float]) -> None:
        self.wall.append(statistics.median(walls))
        self.cpu.append(statistics.median(cpus))

    def __len__(self) -> int:
        return len(self.wall)

    def values(self, clock: str) -> list[float]:
        return self.cpu if clock == "cpu" else self.wall

    def median_ms(self, clock: str = "cpu", first: int | None = None) -> float:
        return statistics.median(self.values(clock)[:first]) * 1e3

    def mean_ms(self, clock: str = "cpu", first: int | None = None) -> float:
        return statistics.fmean(self.values(clock)[:first]) * 1e3

    def p90_ms(self, clock: str = "cpu", first: int | None = None) -> float:
        return float(np.percentile(self.values(clock)[:first], 90)) * 1e3


def measure(call: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall seconds, CPU seconds, result)`` of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = call()
    c1, w1 = time.process_time(), time.perf_counter()
    return w1 - w0, c1 - c0, out


def interleaved(systems: Mapping[str, tuple[Callable[[int], Any], int, int]],
                n_items: int, chunk: int | None = None) -> dict[str, Sample]:
    """Time ``systems`` pass by pass, interleaved.

    ``systems[name] = (run, items, repeats)``: ``run(i)`` handles item ``i``
    (a query, a batch); the system takes part in the first ``items`` items
    only (slow peers answer a few queries), ``repeats`` times each.  One
    *pass* runs a system over all its items in order (consecutive calls get
    different queries, as in a service: no query finds its own data still in
    cache); passes alternate between systems, in a rotating order, so a
    burst of load on the shared machine hits every system alike.  With
    ``chunk``, a pass is cut into runs of ``chunk`` items and the systems
    take turns run by run (still in a rotating order; consecutive calls of a
    system still get different queries): a slow spell of a few seconds, longer
    than a pass of fast calls, then falls on every system's calls alike
    instead of on one system's whole pass.  Returns per-system per-item
    medians over the passes.
    """
    del n_items  # each system's own item count rules
    names = list(systems)
    walls: dict[str, list[list[float]]] = {n: [[] for _ in range(systems[n][1])] for n in names}
    cpus: dict[str, list[list[float]]] = {n: [[] for _ in range(systems[n][1])] for n in names}
    longest = max((items for _, items, _ in systems.values()), default=0)
    step = max(1, chunk or longest)
    turn = 0
    for r in range(max((reps for _, _, reps in systems.values()), default=0)):
        for lo in range(0, longest, step):
            shift = turn % len(names)
            turn += 1
            for name in names[shift:] + names[:shift]:
                run, items, reps = systems[name]
                if r >= reps:
                    continue
                for i in range(lo, min(lo + step, items)):
                    w, c, _ = measure(lambda: run(i))  # noqa: B023 (called at once)
                    walls[name][i].append(w)
                    cpus[name][i].append(c)
    out = {name: Sample() for name in names}
    for name in names:
        for w, c in zip(walls[name], cpus[name]):
            out[name].add(w, c)
    return out


def load_base(checkout: str, module: str) -> Any:
    """``irflow.kernels.<module>`` (``irflow.<module>`` before the subpackages) of another checkout (an older commit: ``git worktree add DIR COMMIT``), for before/after runs.

    Loaded from its file under another name; its own ``from irflow.x import``
    lines bind to this checkout's modules, so only modules whose neighbours
    kept their interface can be compared this way (dense and bm25 here).
    """
    import importlib.util

    path = os.path.join(checkout, "irflow", "kernels", f"{module}.py")
    if not os.path.exists(path):  # a checkout from before irflow/ was grouped into subpackages
        path = os.path.join(checkout, "irflow", f"{module}.py")
    spec = importlib.util.spec_from_file_location(f"irflow_base_{module}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--base: no {path}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    head = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, timeout=10).stdout.strip()
    loaded.REVISION = head or "?"
    return loaded


# -- memory -----------------------------------------------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class MemoryProbe:
    """Peak / retained resident memory of one step of this process (see the module docstring)."""

    def __init__(self) -> None:
        self.method = "VmHWM reset via /proc/self/clear_refs"
        self.base_rss = 0
        self.base_peak = 0

    def start(self) -> None:
        _trim()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.method = "VmHWM reset via /proc/self/clear_refs"
        except OSError:
            self.method = "ru_maxrss delta (clear_refs unavailable: may under-report)"
        rss = _status_kib("VmRSS")
        self.base_rss = rss if rss is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = _status_kib("VmHWM")
        self.base_peak = peak if peak is not None and self.method.startswith("VmHWM") else \
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def stop(self) -> dict[str, float]:
        """``{"peak_mb": ..., "retained_mb": ...}`` since ``start``."""
        if self.method.startswith("VmHWM"):
            peak = _status_kib("VmHWM") or 0
            delta_peak = peak - self.base_rss
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            delta_peak = max(peak - self.base_peak, 0)
        _trim()
        rss = _status_kib("VmRSS") or 0
        return {"peak_mb": delta_peak / 1024, "retained_mb": (rss - self.base_rss) / 1024}


def _trim() -> None:
    """Collect garbage and hand freed heap pages back to the OS, so RSS shows live data."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def run_child(script: str, payload: Mapping[str, Any], timeout: float | None = None) -> dict[str, Any]:
    """Run ``script --child JSON`` in a fresh interpreter; its last stdout line is a JSON object."""
    cmd = [sys.executable, script, "--child", json.dumps(payload)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)})
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {proc.returncode}"}
    lines = [line for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": "no output"}


# -- machine ------------------------------------------------------------------------------


def machine_lines() -> list[str]:
    """Where the figures come from: cores, CPU, load, numpy and its BLAS, thread pools."""
    lines = []
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    lines.append(f"machine: {os.cpu_count()} cores, {model}, {platform.system()} {platform.release()}, "
                 f"load average {', '.join(f'{x:.2f}' for x in load)}")
    lines.append(f"irflow {_revision()}")
    lines.append(f"python {platform.python_version()}, numpy {np.__version__}, "
                 f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            lines.append(f"  threadpool: {pool.get('internal_api')} {pool.get('version')} "
                         f"{pool.get('architecture', '')} threads={pool.get('num_threads')} "
                         f"({os.path.basename(pool.get('filepath', ''))})")
    except ImportError:
        try:
            blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            lines.append(f"  blas: {blas.get('name')} {blas.get('version')} (threadpoolctl not installed)")
        except Exception:  # noqa: BLE001 - informational only
            pass
    return lines


def _revision() -> str:
    """The checkout's commit, and whether library files differ from it (read-only git calls)."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "irflow", "stages", "recipes"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "(not a git checkout)"
    return f"commit {head or '?'}{' + uncommitted library changes' if dirty else ''}"


# -- output -------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A plain-text table, columns right-aligned except the first."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for j, row in enumerate(cells):
        out.append("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        if abs(value) >= 0.1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def ratio(peer: float | None, mine: float | None) -> float | None:
    """``peer / mine`` (> 1: irflow faster), None when either is missing."""
    if peer is None or mine is None or mine <= 0:
        return None
    return peer / mine


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
