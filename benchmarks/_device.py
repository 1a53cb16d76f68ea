"""Helpers of ``benchmarks/device_check.sh``: the machine's description and the summary of a device check.

    python -m benchmarks._device info OUTDIR      # device.json: accelerator, driver, jax, packages, commit, date
    python -m benchmarks._device summary OUTDIR   # summary.md from device.json, pytest.log and bench.txt

The pytest log is read line by line (``pytest -v`` with xdist prints one ``[gwN] PASSED tests/...`` line per
test as it finishes), so a suite stopped by its time limit still counts what it ran; tests it did not reach are
reported as not run, never as passed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

_RESULT = re.compile(r"^(?:\[gw\d+\]\s+(?:\[\s*\d+%\]\s+)?)?(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)")
_RESULT_AFTER = re.compile(r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)")
_SHORT = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
_BENCH = re.compile(r"^BENCH name=(\S+) ours=(\S+) baseline=(\S+) unit=(\S+) ratio=(\S+)$")
_COLLECTED = re.compile(r"(?:collected|\d+ workers \[)\s*(\d+) items?")


def _nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return {"error": f"nvidia-smi failed: {err}"}
    gpus = [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(",")))) for line in
            out.splitlines() if line.strip()]
    return {"gpus": gpus}


def device_info() -> dict:
    """What the check ran on: jax's backend and devices, nvidia-smi's name and driver, versions, commit, date."""
    import jax

    from recon_jax.report.evidence import provenance

    info = provenance()
    info["jax_version"] = jax.__version__
    info["device_kind"] = jax.devices()[0].device_kind
    info["nvidia_smi"] = _nvidia_smi()
    info["date_utc"] = time.strftime("%Y-%m-%d", time.gmtime())
    return info


def parse_pytest_log(text: str) -> dict:
    """Counts and failures from a ``pytest -v -rfE`` log (xdist or not), even when the run was cut off."""
    outcome: dict[str, str] = {}
    reasons: dict[str, str] = {}
    collected = None
    for line in text.splitlines():
        m = _SHORT.match(line.strip())  # the end summary's "FAILED path::test - reason" (before the -v lines')
        if m and "::" in m.group(2):
            reasons[m.group(2)] = (m.group(3) or "").strip()
            outcome.setdefault(m.group(2), m.group(1))
            continue
        m = _RESULT.match(line.strip())
        if m:
            outcome[m.group(2)] = m.group(1)
            continue
        m = _RESULT_AFTER.match(line.strip())
        if m:
            outcome[m.group(1)] = m.group(2)
            continue
        m = _COLLECTED.search(line)
        if m:
            collected = int(m.group(1))
    counts: dict[str, int] = {}
    for v in outcome.values():
        counts[v] = counts.get(v, 0) + 1
    failed = sorted(k for k, v in outcome.items() if v in ("FAILED", "ERROR"))
    finished = bool(re.search(r"^=+ .*\b(passed|failed|error)\b.* in [\d.]+s", text, re.M))
    return {"collected": collected, "counts": counts, "failed": [(k, reasons.get(k, "")) for k in failed],
            "finished": finished, "not_run": None if collected is None else max(0, collected - len(outcome))}


def parse_bench(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        m = _BENCH.match(line.strip())
        if m:
            rows.append({"name": m.group(1), "ours": float(m.group(2)), "baseline": float(m.group(3)),
                         "unit": m.group(4), "ratio": float(m.group(5)), "line": line.strip()})
    return rows


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def summary(outdir: str) -> str:
    """summary.md of a device check folder (device.json, pytest.log, bench.txt, phases.txt)."""
    info = json.loads(_read(os.path.join(outdir, "device.json")) or "{}")
    suite = parse_pytest_log(_read(os.path.join(outdir, "pytest.log")))
    bench = parse_bench(_read(os.path.join(outdir, "bench.txt")))
    phases = _read(os.path.join(outdir, "phases.txt")).strip()
    machine = info.get("machine", {})
    smi = info.get("nvidia_smi", {}).get("gpus", [])
    lines = ["# Device check", "",
             f"- device: {info.get('device_kind')} (backend {machine.get('jax_backend')}); "
             + (", ".join(f"{g['name']}, driver {g['driver']}, {g['memory']}" for g in smi) or "no nvidia-smi"),
             f"- jax {info.get('jax_version')}, python {info.get('versions', {}).get('python')}; "
             f"flax {info.get('versions', {}).get('flax')}, optax {info.get('versions', {}).get('optax')}",
             f"- commit {info.get('git_commit')}" + (f" ({info['git_commit_source']})"
                                                     if info.get("git_commit_source") else ""),
             f"- date {info.get('time_utc')}; host {machine.get('cpu_model')}, {machine.get('cpu_count')} CPUs", ""]
    c = suite["counts"]
    lines += ["## Test suite", "",
              f"{c.get('PASSED', 0)} passed, {c.get('FAILED', 0)} failed, {c.get('ERROR', 0)} errors, "
              f"{c.get('SKIPPED', 0)} skipped, {c.get('XFAIL', 0)} xfailed of {suite['collected']} collected; "
              + ("the run finished." if suite["finished"] else
                 f"the run was CUT OFF by its time limit: {suite['not_run']} tests not run."), ""]
    if suite["failed"]:
        lines += ["Failures:", ""] + [f"- `{k}`" + (f": {r}" if r else "") for k, r in suite["failed"]] + [""]
    lines += ["## Benchmarks", ""]
    if bench:
        lines += ["| name | ours | baseline | unit | ratio |", "|---|---|---|---|---|"]
        lines += [f"| {b['name']} | {b['ours']:.6g} | {b['baseline']:.6g} | {b['unit']} | {b['ratio']:.4g} |"
                  for b in bench]
    else:
        lines.append("No BENCH lines (the benchmarks did not run or were cut off).")
    if phases:
        lines += ["", "## Phases (wall seconds)", "", "```", phases, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("info", "summary"):
        raise SystemExit("usage: python -m benchmarks._device {info|summary} OUTDIR")
    cmd, outdir = argv
    os.makedirs(outdir, exist_ok=True)
    if cmd == "info":
        with open(os.path.join(outdir, "device.json"), "w") as f:
            json.dump(device_info(), f, indent=1, default=str)
    else:
        text = summary(outdir)
        with open(os.path.join(outdir, "summary.md"), "w") as f:
            f.write(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
