"""Helpers of ``benchmarks/device_check.sh``: the machine's description and the summary of a device check.

    python -m benchmarks._device info OUTDIR      # device.json: accelerator, driver, jax, packages, commit, date
    python -m benchmarks._device summary OUTDIR   # summary.md from device.json, pytest.log and bench.txt
    python -m benchmarks._device publish OUTDIR RESULTS_DIR [LOG ...]   # a committed result: report.md,
        # metrics.json (with the goals as claims), config.json, logs; each LOG a later pytest run of the tests the
        # first one did not reach (merged: a failure in any run stays a failure)

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

_RESULT = re.compile(r"^(?:\[gw\d+\]\s+(?:\[\s*\d+%\]\s+)?)?(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+::.+?)\s*$")
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

    from recon_jax.evidence import provenance

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
    finished = bool(re.search(r"^=+ .*\b(passed|failed|error)\b.* in [\d.]+s", text, re.M))
    return _suite(outcome, reasons, collected, finished)


def merge_suites(first: dict, *later: dict) -> dict:
    """One suite from a cut-off run and later runs of (at least) the tests it did not reach, on the same commit and
    machine: a test's outcome is its last one, except that a FAILED or ERROR in any run stays (a test that failed
    once and passed on a rerun is reported as failed, not hidden). ``collected`` is the first run's."""
    outcome = dict(first["outcomes"])
    reasons = dict(first["failed"])
    for run in later:
        for test, result in run["outcomes"].items():
            if outcome.get(test) not in ("FAILED", "ERROR"):
                outcome[test] = result
        for test, reason in run["failed"]:
            reasons[test] = reasons.get(test) or reason
    return _suite(outcome, reasons, first["collected"], finished=False)


def _suite(outcome: dict, reasons: dict, collected, finished: bool) -> dict:
    counts: dict[str, int] = {}
    for v in outcome.values():
        counts[v] = counts.get(v, 0) + 1
    failed = sorted(k for k, v in outcome.items() if v in ("FAILED", "ERROR"))
    not_run = None if collected is None else max(0, collected - len(outcome))
    return {"collected": collected, "counts": counts, "failed": [(k, reasons.get(k, "")) for k in failed],
            "finished": finished or not_run == 0, "not_run": not_run, "outcomes": outcome}


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


def summary(outdir: str, suite: dict | None = None) -> str:
    """summary.md of a device check folder (device.json, pytest.log, bench.txt, phases.txt); ``suite``: the test
    counts to show instead of pytest.log's (e.g. :func:`merge_suites` of it and a follow-up run)."""
    info = json.loads(_read(os.path.join(outdir, "device.json")) or "{}")
    if suite is None:
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
              + ("every collected test ran." if suite["finished"] else
                 f"the run was CUT OFF by its time limit: {suite['not_run']} tests not run."), ""]
    if suite["failed"]:
        lines += ["Failures:", ""] + [f"- `{k}`" + (f": {r}" if r else "") for k, r in suite["failed"]] + [""]
    failures_log = _read(os.path.join(outdir, "failures.log")).strip()
    if failures_log:
        lines += ["Failures rerun alone with tracebacks (`failures.log`), last lines:", "", "```",
                  *failures_log.splitlines()[-40:], "```", ""]
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


# The accelerator goals (issue 34), fixed before any run: (claim, BENCH line, field, threshold).
GOALS = (
    ("Balle MLP shadow models at least 20,000 per second (12,200 measured earlier on an H100)", "shadow_vs_loop",
     "ours", 20000.0),
    ("DP-GD shadow models at least 0.8 of non-private", "dpgd_ghost_vs_nonprivate", "ratio", 0.8),
    ("minibatch DP-SGD shadow models at least 0.5 of full-batch DP-GD", "dpsgd_minibatch_vs_fullbatch_shadow",
     "ratio", 0.5),
    ("reconstructor training at least 0.5 of the measured float32 matmul peak", "reconn_fraction_of_peak", "ratio",
     0.5),
)


def publish(outdir: str, results_dir: str, follow_up_logs: tuple[str, ...] = ()) -> dict:
    """Writes a device check as a committed result: report.md (the summary and its claims), metrics.json (suite
    counts and failures, BENCH lines, claims with verdicts: the suite passes, each goal of :data:`GOALS` is met),
    config.json (device.json's provenance, the phases' wall time, what ran) and the logs. ``follow_up_logs``: pytest
    logs of later runs of what the check's suite did not reach (:func:`merge_suites`), copied beside it.

    Verdicts: the suite "fails" with any failure, "holds" when every collected test ran and none failed, and is
    "undecided" when tests did not run but none of those that ran failed; a goal holds or fails on its measured
    figure (each BENCH figure is one measurement, no interval) and is undecided when it was not measured."""
    from recon_jax.evidence import claim, claims_markdown, comparison

    info = json.loads(_read(os.path.join(outdir, "device.json")))
    suite = parse_pytest_log(_read(os.path.join(outdir, "pytest.log")))
    if follow_up_logs:
        suite = merge_suites(suite, *(parse_pytest_log(_read(p)) for p in follow_up_logs))
    bench = parse_bench(_read(os.path.join(outdir, "bench.txt")))
    by_name = {b["name"]: b for b in bench}
    c = suite["counts"]
    verdict = "fails" if suite["failed"] else ("holds" if suite["finished"] else "undecided")
    claims = [claim("the test suite passes on the accelerator", detail=
                    f"{c.get('PASSED', 0)} passed, {len(suite['failed'])} failed or errors, {c.get('SKIPPED', 0)} "
                    f"skipped of {suite['collected']}" + ("" if suite["finished"] else
                                                          f"; cut off, {suite['not_run']} not run"), verdict=verdict)]
    for name, line, field, threshold in GOALS:
        b = by_name.get(line)
        if b is None:
            claims.append(claim(name, detail="not measured", verdict="undecided"))
            continue
        claims.append(claim(name, detail=f"{line}: {field} {b[field]:.4g} (goal {threshold:g}); ours "
                                         f"{b['ours']:.6g} vs baseline {b['baseline']:.6g} {b['unit']}",
                            comparisons=[comparison(f"{line} {field}", b[field], ">=", threshold)]))
    phases: dict[str, float] = {}
    for line in _read(os.path.join(outdir, "phases.txt")).splitlines():
        name, _, secs = line.partition(" ")
        phases[name] = phases.get(name, 0.0) + float(secs) if name in ("suite", "bench") else float(secs)
    os.makedirs(results_dir, exist_ok=True)
    suite_out = {k: v for k, v in suite.items() if k != "outcomes"}
    metrics = {"device": info.get("device_kind"), "suite": {**suite_out, "failed": [list(f) for f in suite["failed"]]},
               "bench": {b["name"]: {k: b[k] for k in ("ours", "baseline", "unit", "ratio")} for b in bench},
               "claims": claims}
    commands = [ln[2:].strip() for ln in _read(os.path.join(outdir, "bench.txt")).splitlines() if ln.startswith("$ ")]
    config = {**info, "config": {"bench_commands": commands, "phases_s": phases},
              "wall_time_s": round(sum(v for k, v in phases.items() if k in ("suite", "bench")), 1)}
    report = summary(outdir, suite).rstrip("\n") + "\n\n" + claims_markdown(claims)
    for name, text in (("report.md", report), ("metrics.json", json.dumps(metrics, indent=1)),
                       ("config.json", json.dumps(config, indent=1, default=str))):
        with open(os.path.join(results_dir, name), "w") as f:
            f.write(text + ("\n" if not text.endswith("\n") else ""))
    for name in ("pytest.log", "bench.txt", "failures.log"):
        if os.path.exists(os.path.join(outdir, name)):
            shutil.copy2(os.path.join(outdir, name), os.path.join(results_dir, name))
    for i, path in enumerate(follow_up_logs, start=1):
        shutil.copy2(path, os.path.join(results_dir, f"pytest_follow_up{i}.log"))
    return metrics


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) >= 3 and argv[0] == "publish":
        publish(argv[1], argv[2], tuple(argv[3:]))
        return 0
    if len(argv) != 2 or argv[0] not in ("info", "summary"):
        raise SystemExit("usage: python -m benchmarks._device {info|summary} OUTDIR | publish OUTDIR RESULTS_DIR "
                         "[LOG ...]")
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
