"""benchmarks/device_check.sh: its CPU dry run end to end, and the log parsing its summary rests on.

The dry run is the same script an accelerator session runs (wheels aside, through benchmarks/device_session.sh, which
calls device_check.sh once for the benchmarks and once for the suite): install step, device.json, a few test files
through pytest, one benchmark, summary.md. The parser is checked on hand-written pytest output,
including a run cut off by its time limit, where tests that did not run must not count as passed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from benchmarks import _device

ROOT = Path(__file__).resolve().parents[1]

_LOG = """\
============================= test session starts ==============================
created: 2/2 workers
2 workers [5 items]

tests/a.py::test_one
[gw0] [ 20%] PASSED tests/a.py::test_one
[gw1] [ 40%] FAILED tests/b.py::test_two[0.5]
[gw0] [ 60%] SKIPPED tests/a.py::test_three
"""

_LOG_END = """\
[gw1] [ 80%] PASSED tests/b.py::test_four
[gw0] [100%] ERROR tests/c.py::test_five
=========================== short test summary info ============================
FAILED tests/b.py::test_two[0.5] - AssertionError: 1.001 > 1.0
ERROR tests/c.py::test_five - RuntimeError: no GPU
============= 2 passed, 1 failed, 1 skipped, 1 error in 12.34s =============
"""


def test_parse_cut_off_log_counts_only_what_ran():
    got = _device.parse_pytest_log(_LOG)
    assert got["collected"] == 5
    assert got["counts"] == {"PASSED": 1, "FAILED": 1, "SKIPPED": 1}
    assert got["not_run"] == 2 and got["finished"] is False
    assert got["failed"] == [("tests/b.py::test_two[0.5]", "")]


def test_parse_finished_log_names_failures_with_reasons():
    got = _device.parse_pytest_log(_LOG + _LOG_END)
    assert got["counts"] == {"PASSED": 2, "FAILED": 1, "SKIPPED": 1, "ERROR": 1}
    assert got["finished"] is True and got["not_run"] == 0
    assert got["failed"] == [("tests/b.py::test_two[0.5]", "AssertionError: 1.001 > 1.0"),
                             ("tests/c.py::test_five", "RuntimeError: no GPU")]


def test_parse_bench_lines():
    rows = _device.parse_bench("noise\nBENCH name=a ours=2 baseline=4 unit=models/s ratio=0.5\nexit 0\n")
    assert [(r["name"], r["ours"], r["baseline"], r["unit"], r["ratio"]) for r in rows] == [
        ("a", 2.0, 4.0, "models/s", 0.5)]


def test_publish_turns_goals_into_claims(tmp_path):
    check = tmp_path / "check"
    check.mkdir()
    (check / "device.json").write_text(json.dumps({"device_kind": "NVIDIA H200", "git_commit": "0" * 40,
                                                   "time_utc": "2026-11-26T00:00:00Z", "versions": {"jax": "0.11.2"},
                                                   "machine": {"cpu_model": "x", "cpu_count": 16}}))
    (check / "pytest.log").write_text(_LOG + _LOG_END)
    (check / "bench.txt").write_text("$ python -m benchmarks.run shadow\n"
                                     "BENCH name=shadow_vs_loop ours=25000 baseline=100 unit=models/s ratio=250\n"
                                     "BENCH name=dpgd_ghost_vs_nonprivate ours=7 baseline=10 unit=models/s ratio=0.7\n")
    (check / "phases.txt").write_text("install 0\ninfo 5\nbench 100\nsuite 300\n")
    metrics = _device.publish(str(check), str(tmp_path / "res"))
    verdicts = {c["name"].split(" at least")[0]: c["verdict"] for c in metrics["claims"]}
    assert verdicts == {"the test suite passes on the accelerator": "fails", "Balle MLP shadow models": "holds",
                        "DP-GD shadow models": "fails", "minibatch DP-SGD shadow models": "undecided",
                        "reconstructor training": "undecided"}
    assert all(c["holds"] == (c["verdict"] == "holds") for c in metrics["claims"])
    assert "not measured" in metrics["claims"][3]["detail"]
    config = json.loads((tmp_path / "res" / "config.json").read_text())
    assert config["wall_time_s"] == 400 and config["config"]["bench_commands"] == ["python -m benchmarks.run shadow"]
    report = (tmp_path / "res" / "report.md").read_text()
    assert "## Claims" in report and "1 of 5" in report


def test_follow_up_run_completes_a_cut_off_suite_and_keeps_its_failures(tmp_path):
    first = _device.parse_pytest_log(_LOG)  # cut off: a passed, b failed, one skipped, two not run
    # The follow-up reran whole files: b's failure passes there, c's test fails, a's passes again.
    later = _device.parse_pytest_log("[gw0] PASSED tests/a.py::test_one\n[gw1] PASSED tests/b.py::test_two[0.5]\n"
                                     "[gw1] PASSED tests/b.py::test_four\n[gw0] ERROR tests/c.py::test_five\n")
    merged = _device.merge_suites(first, later)
    assert merged["collected"] == 5 and merged["not_run"] == 0 and merged["finished"]
    assert merged["counts"] == {"PASSED": 2, "FAILED": 1, "SKIPPED": 1, "ERROR": 1}
    assert [t for t, _ in merged["failed"]] == ["tests/b.py::test_two[0.5]", "tests/c.py::test_five"]
    partial = _device.merge_suites(first, _device.parse_pytest_log("[gw0] PASSED tests/b.py::test_four\n"))
    assert partial["not_run"] == 1 and not partial["finished"]

    check = tmp_path / "check"
    check.mkdir()
    (check / "device.json").write_text(json.dumps({"device_kind": "NVIDIA H100", "machine": {}}))
    (check / "pytest.log").write_text(_LOG)
    log = tmp_path / "rest.log"
    log.write_text("[gw0] PASSED tests/b.py::test_four\n[gw0] PASSED tests/c.py::test_five\n")
    metrics = _device.publish(str(check), str(tmp_path / "res"), (str(log),))
    suite_claim = metrics["claims"][0]
    assert suite_claim["verdict"] == "fails" and "1 failed" in suite_claim["detail"]  # b's failure stays
    assert metrics["suite"]["not_run"] == 0 and "outcomes" not in metrics["suite"]
    assert (tmp_path / "res" / "pytest_follow_up1.log").read_text() == log.read_text()
    report = (tmp_path / "res" / "report.md").read_text()
    assert "3 passed, 1 failed, 0 errors, 1 skipped" in report and "every collected test ran" in report


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the dry run is what the script does without an accelerator")
def test_session_dry_run_benchmarks_then_suite_in_the_background(tmp_path):
    """benchmarks/device_session.sh with TABLE2=0 as an accelerator session runs it (start, then finish), at the dry
    run's sizes: the benchmarks first, the suite in its own session, everything collected in OUT."""
    env = dict(os.environ, PYTHON=sys.executable, WHEELS="none", RECON_JAX_GIT_COMMIT="0" * 40, TABLE2="0",
               RJ_STATE=str(tmp_path / "state"), START_WAIT="240")
    out = tmp_path / "out"
    script = str(ROOT / "benchmarks" / "device_session.sh")
    start = subprocess.run(["bash", script, "start", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=400)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    finish = subprocess.run(["bash", script, "finish", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert finish.returncode == 0, finish.stdout[-2000:] + finish.stderr[-2000:]
    status = (out / "status.txt").read_text()
    assert "suite rc: 0" in status and "run rc" not in status  # no Table II launched
    # What device_check.sh wrote in its two calls (benchmarks, then the suite), as an accelerator session leaves it.
    check = tmp_path / "state" / "check"
    info = json.loads((check / "device.json").read_text())
    assert info["machine"]["jax_backend"] == "cpu" and info["jax_version"] == jax.__version__
    suite = _device.parse_pytest_log((check / "pytest.log").read_text())
    assert suite["finished"] and suite["counts"].get("PASSED", 0) >= 10 and not suite["failed"]
    names = {r["name"] for r in _device.parse_bench((check / "bench.txt").read_text())}
    assert {"matmul_peak", "reconn_fraction_of_peak", "reconn_streamed_vs_device"} <= names
    summary = (check / "summary.md").read_text()
    assert f"{suite['counts']['PASSED']} passed, 0 failed" in summary and "every collected test ran" in summary
    assert "reconn_fraction_of_peak" in summary and (out / "summary.md").read_text() == summary
    check_phases = [line.split()[0] for line in (check / "phases.txt").read_text().splitlines()]
    assert check_phases == ["install", "info", "bench", "install", "info", "suite"]  # the two calls add up
    phases = [line.split()[0] for line in status.splitlines()
              if len(line.split()) == 2 and line.split()[0] in ("bench", "suite") and line.split()[1].isdigit()]
    assert phases == ["bench", "suite"]  # the benchmarks alone first
    summary = (out / "summary.md").read_text()
    assert "every collected test ran" in summary and "reconn_fraction_of_peak" in summary
    assert not (out / "balle_gpu.tgz").exists()
