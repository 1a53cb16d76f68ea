"""Benchmark: peak resident memory per FFT point of the PLD composition, against the constant the memory guard uses.

The PLD routes (``vmf_pld_epsilon``, ``dpsgd_epsilon(accountant="pld")``, ``pld_tradeoff``) refuse a composition
whose FFT (``dp_accounting``'s ``self_compose``: one FFT per direction, of length ``next_fast_len`` of the truncated
support) would need more than ``_pld_memory.BUDGET_BYTES``, at ``_pld_memory.FFT_POINT_BYTES`` bytes per point of
the longest FFT. This script measures that per-point cost.

Method, per case (one step's PLD and a number of steps): two child processes run the same code up to the
composition (imports, the one step built as the route builds it, the composed size computed as the guard computes
it, ``gc.collect()``, then the peak resident size reset to the current one through ``/proc/self/clear_refs``, so
that neither child's peak is the one step's); one of them then composes the steps and converts to epsilon as the
route does (the guard is bypassed, so refused cases are measured too), the other exits there. Each child's
``ru_maxrss`` comes from ``os.wait4`` on that child (``RUSAGE_CHILDREN`` would give the largest child so far, not
each one). The composition's memory is the difference; the composing child also reports its own peak above its
resident size before composing (``VmHWM - VmRSS``), a check on the difference. Bytes per FFT point are the larger
of the two over the case's longest FFT; over several step counts of the same step a least-squares line separates the
per-point slope from a fixed cost. What the step holds meanwhile (its PMFs, 8 bytes per grid point and direction) is
in both children and not counted here: 9 MiB, under 0.5% of the composition, in the kappa = 300, 1,000-step case.

BENCH lines, one per route (``pld_fft_bytes_per_point_vmf``, ``pld_fft_bytes_per_point_gaussian``): ``ours`` is the
guard's constant, ``baseline`` the largest measured bytes per FFT point, ``ratio = ours / baseline`` (> 1: the
guard over-counts, i.e. stays conservative, by that factor). Linux only (``/proc``); where the peak cannot be reset
the difference also contains whatever the step's peak exceeded the resident size by (the slope is unaffected).

    python -m benchmarks.pld_memory [--vmf_cases "300,3,0.01:10/100/300/1000"] [--gaussian_cases "0.1,0.01:100/1000"]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import bench_line

_ROOT = Path(__file__).resolve().parents[1]
# kappa = 300, dim = 3, q = 0.01 at 1,000 steps: refused by vmf_pld_epsilon (28.8M FFT points, 2.15 GiB at 80 B/point).
_VMF_CASES = "300,3,0.01:10/100/300/1000;100,3,0.01:3000;300,3,1:1000;50,100,0.1:3000"
_GAUSSIAN_CASES = "0.1,0.01:100/1000;0.2,0.001:10000"


def _status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def _reset_peak() -> bool:
    """Resets this process's peak resident size to the current one (Linux >= 4.0); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _child(spec: dict) -> None:
    """One measurement process: builds one step, sizes the composition, resets the peak, composes if asked."""
    import importlib

    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from recon_jax.accounting import _pld_memory
    dpsgd = importlib.import_module("recon_jax.accounting.dpsgd")
    vmf_pld = importlib.import_module("recon_jax.accounting.vmf_pld")

    grid, steps = spec["grid"], spec["steps"]
    if spec["route"] == "vmf":  # as vmf_pld_epsilon builds and composes it (the composition guard bypassed)
        kappa, dim, q = spec["case"]
        pld, directions = vmf_pld._checked_pld(kappa, dim, q, grid, vmf_pld._WIDTH, vmf_pld._CELLS, True)

        def compose():
            return pld.self_compose(steps)
    else:  # as dpsgd_epsilon(accountant="pld") builds and composes it
        sigma, q = spec["case"]
        parts = dpsgd._gaussian_deltas(sigma, q, grid)
        directions = [_pld_memory.summarise(lo, _pld_memory.connect_dots_probs(d, grid)) for lo, _, d in parts]
        pld = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=grid, sampling_prob=q)
        del parts

        def compose():
            return pld_lib.identity(grid).compose(pld.self_compose(steps))
    size = _pld_memory.composed_size(directions, steps)
    gc.collect()
    reset = _reset_peak()
    before = _status()["VmRSS"]
    out = {"fft_points": size.fft_points, "kept_points": size.kept_points, "reset": reset, "seconds": 0.0}
    if spec["compose"]:
        t0 = time.perf_counter()
        composed = compose()
        out["epsilon"] = float(composed.get_epsilon_for_delta(spec["delta"]))
        out["seconds"] = time.perf_counter() - t0
        out["in_process"] = _status()["VmHWM"] - before
    print("RESULT " + json.dumps(out), flush=True)


def _run_child(spec: dict) -> tuple[dict, int]:
    """Runs :func:`_child` in a fresh interpreter; its result and its own peak resident size (bytes)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    code = "import json, sys; from benchmarks.pld_memory import _child; _child(json.loads(sys.argv[1]))"
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(spec)], cwd=_ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        stdout = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (Popen.wait would discard it)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"measurement child failed ({proc.returncode}) for {spec}:\n{stderr[-3000:]}")
    result = json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])
    return result, usage.ru_maxrss * 1024  # kilobytes on Linux


def _parse_cases(text: str, arity: int) -> list[tuple[tuple[float, ...], list[int]]]:
    """``"a,b[,c]:s1/s2;..."`` -> [((a, b[, c]), [s1, s2]), ...]."""
    cases = []
    for item in filter(None, (t.strip() for t in text.split(";"))):
        head, _, steps = item.partition(":")
        values = tuple(float(v) for v in head.split(","))
        if len(values) != arity or not steps:
            raise ValueError(f"bad case {item!r}: expected {arity} comma-separated numbers, ':' and steps 's1/s2/...'")
        cases.append((values, [int(s) for s in steps.split("/")]))
    return cases


def _measure(route: str, cases, grid: float, delta: float) -> list[dict]:
    from recon_jax.accounting import _pld_memory

    rows = []
    for case, step_counts in cases:
        label = ",".join(f"{v:g}" for v in case)
        spec = {"route": route, "case": list(case), "grid": grid, "delta": delta}
        # One baseline per step (its state before composing does not depend on the number of steps).
        base, base_peak = _run_child({**spec, "steps": max(step_counts), "compose": False})
        for steps in step_counts:
            res, peak = _run_child({**spec, "steps": steps, "compose": True})
            used = max(peak - base_peak, res["in_process"])
            row = {"route": route, "case": case, "steps": steps, "fft_points": res["fft_points"],
                   "kept_points": res["kept_points"], "difference": peak - base_peak, "in_process": res["in_process"],
                   "used": used, "bytes_per_point": used / res["fft_points"], "epsilon": res["epsilon"],
                   "seconds": res["seconds"], "reset": res["reset"] and base["reset"],
                   "guard_bytes": _pld_memory.FFT_POINT_BYTES * res["fft_points"]}
            rows.append(row)
            print(f"  {route} {label} steps={steps:>6}: FFT {row['fft_points']:>10,} points; above the step: "
                  f"{row['difference'] / 2**20:7.1f} MiB (in process {row['in_process'] / 2**20:7.1f} MiB), "
                  f"{row['bytes_per_point']:5.1f} B/point; guard {row['guard_bytes'] / 2**30:.3f} GiB; "
                  f"eps {row['epsilon']:.4g} ({row['seconds']:.1f} s){'' if row['reset'] else '; peak NOT reset'}",
                  flush=True)
        mine = [r for r in rows if r["case"] == case]
        points = np.array([r["fft_points"] for r in mine], np.float64)
        if np.unique(points).size >= 2:
            slope, fixed = np.polyfit(points, np.array([r["used"] for r in mine], np.float64), 1)
            print(f"  {route} {label}: least squares over {points.size} sizes: {slope:.1f} B/point + "
                  f"{fixed / 2**20:.1f} MiB fixed", flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vmf_cases", default=_VMF_CASES, help="'kappa,dim,q:steps/steps;...' ('' for none)")
    parser.add_argument("--gaussian_cases", default=_GAUSSIAN_CASES, help="'sigma,q:steps/steps;...' ('' for none)")
    parser.add_argument("--vmf_discretization", type=float, default=1e-3, help="vmf_pld_epsilon's default")
    parser.add_argument("--gaussian_discretization", type=float, default=1e-4, help="dpsgd_epsilon's default")
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args([] if argv is None else argv)
    from recon_jax.accounting import _pld_memory

    print(f"peak resident memory of the PLD composition per point of its longest FFT; the guard counts "
          f"{_pld_memory.FFT_POINT_BYTES} B/point against a budget of {_pld_memory.BUDGET_BYTES / 2**30:g} GiB",
          flush=True)
    out = {}
    for route, cases, grid in (("vmf", _parse_cases(args.vmf_cases, 3), args.vmf_discretization),
                               ("gaussian", _parse_cases(args.gaussian_cases, 2), args.gaussian_discretization)):
        if not cases:
            continue
        rows = _measure(route, cases, grid, args.delta)
        worst = max(r["bytes_per_point"] for r in rows)
        print(f"[{route}] largest measured {worst:.1f} B per FFT point; the guard counts {_pld_memory.FFT_POINT_BYTES}",
              flush=True)
        bench_line(f"pld_fft_bytes_per_point_{route}", float(_pld_memory.FFT_POINT_BYTES), worst, "B/point",
                   ratio=_pld_memory.FFT_POINT_BYTES / worst)
        out[route] = rows
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
