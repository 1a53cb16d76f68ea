"""The total wall time of a run made by several processes (segments) in one workdir: config.json's ``wall_time_s``
and report.md sum the segments whose stores the run resumed."""

import json
import os

import pytest

from recon_jax.evidence import claim, finish_run, keyed_dir, start_run, wall_time
from recon_jax.evidence.segments import read_segments


def _claims():
    return [claim("c", True, "d", verdict="holds")]


def _segment(workdir, seconds, store=True, finish=True):
    """One process in ``workdir`` that ran ``seconds`` (its clock started that long ago) and, with ``store``,
    stored (or, when an earlier one did, resumed) a keyed result."""
    run = start_run(str(workdir), {"x": 1})
    run.start -= seconds
    if store:
        path = keyed_dir(run.workdir, "part", {"x": 1})
        if not os.path.exists(os.path.join(path, "result.txt")):
            with open(os.path.join(path, "result.txt"), "w") as f:
                f.write("stored")
    if finish:
        finish_run(run, {"m": 1.0}, "# r\n", _claims())
    return run


def _config(workdir):
    with open(os.path.join(workdir, "config.json")) as f:
        return json.load(f)


def test_a_resumed_run_sums_its_segments(tmp_path):
    _segment(tmp_path, 100.0)
    run = _segment(tmp_path, 30.0, finish=False)
    before = wall_time(run)  # what a report's "total time" line reads before finish_run
    assert (before.segments, before.complete) == (2, True) and 130.0 <= before.seconds < 131.0
    assert before.text() == "2.2 min in 2 segments"
    finish_run(run, {"m": 1.0}, "# r\n", _claims())
    info = _config(tmp_path)
    assert 130.0 <= info["wall_time_s"] < 131.0  # was the last segment's 30 s
    assert info["wall_time_segments"] == 2 and info["wall_time_complete"] is True
    assert 30.0 <= info["segment_wall_time_s"] < 31.0
    report = (tmp_path / "report.md").read_text()
    assert "## Segments" in report and "Total wall time: 2.2 min in 2 segments" in report


def test_a_rerun_that_resumed_nothing_is_its_own_total(tmp_path):
    _segment(tmp_path, 100.0, store=False)
    _segment(tmp_path, 30.0, store=False)  # recomputed everything: the first process made nothing it used
    info = _config(tmp_path)
    assert 30.0 <= info["wall_time_s"] < 31.0 and info["wall_time_segments"] == 1
    assert [s["resumed"] for s in read_segments(str(tmp_path))] == [False, False]
    assert "the last process alone, which resumed nothing" in (tmp_path / "report.md").read_text()


def test_a_segment_that_stopped_early_counts_to_its_last_write(tmp_path):
    _segment(tmp_path, 0.0, finish=False)  # killed after storing its part
    first = read_segments(str(tmp_path))[0]
    stored = next(tmp_path.glob("part-*")) / "result.txt"
    os.utime(stored, (first["started_unix"] + 50.0, first["started_unix"] + 50.0))  # its last write, 50 s in
    _segment(tmp_path, 30.0)
    first = read_segments(str(tmp_path))[0]
    assert first["seconds"] is None and first["seconds_at_least"] == pytest.approx(50.0, abs=0.2)
    info = _config(tmp_path)
    assert 79.8 <= info["wall_time_s"] < 81.0 and info["wall_time_complete"] is False
    report = (tmp_path / "report.md").read_text()
    assert "| >= 50" in report and "Total wall time: at least 1.3 min in 2 segments" in report


def test_the_risk_reports_runtime_line_gives_the_total():
    from recon_jax.report import text

    resumed = {"runtime_seconds": 30.0, "total_seconds": 130.0, "total_segments": 2, "total_complete": True}
    assert text._runtime(resumed) == "2.2 min in 2 segments (see Segments), this process 0.5 min"
    assert text._runtime(dict(resumed, total_complete=False)).startswith("at least 2.2 min in 2 segments")
    assert text._runtime({"runtime_seconds": 30.0, "total_seconds": 30.0, "total_segments": 1}) == "0.5 min"


def test_a_run_in_another_workdir_does_not_count_as_this_ones_resume(tmp_path):
    """Whether a process resumed is recorded in its run's workdir (segments.json), not for the whole process: a run
    in a workdir nested in this one's, made by this same process, resumes its own store; this run resumed nothing
    of its earlier segment, so its total is its own time."""
    _segment(tmp_path, 100.0, store=False)
    outer = start_run(str(tmp_path), {"x": 1})
    outer.start -= 30.0
    inner = tmp_path / "inner"
    _segment(inner, 10.0)
    _segment(inner, 5.0)  # resumes the inner run's store
    assert [s["resumed"] for s in read_segments(str(inner))] == [False, True]
    assert wall_time(outer).segments == 1
    finish_run(outer, {"m": 1.0}, "# r\n", _claims())
    info = _config(tmp_path)
    assert 30.0 <= info["wall_time_s"] < 31.0 and info["wall_time_segments"] == 1
    assert [s["resumed"] for s in read_segments(str(tmp_path))] == [False, False]


def test_two_runs_of_one_process_record_their_own_resumes(tmp_path):
    """Two runs interleaved in one process, in two workdirs: each segment records only what it resumed itself, and
    a store outside any run's workdir records nothing."""
    a, b = tmp_path / "a", tmp_path / "b"
    _segment(a, 100.0)
    _segment(b, 100.0)
    run_a, run_b = start_run(str(a), {"x": 1}), start_run(str(b), {"x": 1})
    keyed_dir(str(tmp_path / "elsewhere"), "part", {"x": 1})
    keyed_dir(run_b.workdir, "part", {"x": 1})  # run b resumes; run a does not
    assert (wall_time(run_a).segments, wall_time(run_b).segments) == (1, 2)
    assert read_segments(str(a))[-1]["resumed"] is False and read_segments(str(b))[-1]["resumed"] is True
