"""The segments of a run: every process that works in a workdir (a first run, each resume after a stop).

``segments.json`` in the workdir lists them (commit, code hash, start, wall seconds, finished);
:func:`recon_jax.evidence.run.start_run` opens one (:func:`open_segment`) and
:func:`recon_jax.evidence.run.finish_run` closes it (:func:`close_segment`), lists them in metrics.json and, when
there are several, in report.md (:func:`segments_markdown`) with their total wall time (:class:`WallTime`), which is
config.json's ``wall_time_s``. A segment that stopped early (killed, out of time) has no wall seconds of its own: the
next segment records a lower bound, from its start to the last file it wrote (``seconds_at_least``). A process that
resumed nothing the earlier ones stored (a rerun that found no content in the workdir's keyed directories) made its
results alone: the total is then its own wall time. Whether it resumed is recorded in the workdir itself, in its
open segment (:func:`mark_resumed`, called by :func:`recon_jax.evidence.run.keyed_dir` on a directory it finds
with content), so two runs in one process, or a run in another workdir (one nested in this one included), do not
see each other's resumes.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import os
import time

from recon_jax.io import atomic_write_json, strict_json

__all__ = ["WallTime", "read_segments", "total_wall_time"]  # open/close/mark/markdown: for evidence.run

SEGMENTS = "segments.json"
_WRITTEN_AT_START = (SEGMENTS, "config.json")  # rewritten by the next segment's start: no sign of the last one's end


@dataclasses.dataclass(frozen=True)
class WallTime:
    """The wall time of a run made by one or more segments (processes) in one workdir.

    ``seconds`` sums every segment's wall time: a finished segment's own, a segment that stopped early its lower
    bound (``seconds_at_least``; then ``complete`` is False and the sum is a lower bound too); ``this_segment`` is
    the running process's share.
    """

    seconds: float
    segments: int
    complete: bool
    this_segment: float

    def text(self, unit: str = "min") -> str:
        """``"12.3 min"``, or ``"... in N segments"`` (``"at least ..."`` when not complete) for several segments.

        >>> WallTime(738.0, 1, True, 738.0).text(), WallTime(738.0, 3, False, 60.0).text("s")
        ('12.3 min', 'at least 738.0 s in 3 segments')
        """
        value = f"{self.seconds / 60:.1f} min" if unit == "min" else f"{self.seconds:.1f} s"
        if self.segments < 2:
            return value
        return f"{'' if self.complete else 'at least '}{value} in {self.segments} segments"


def read_segments(workdir: str) -> list:
    """The segments recorded in ``workdir`` (oldest first; empty before the first run)."""
    path = os.path.join(workdir, SEGMENTS)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def _seconds_at_least(workdir: str, segment: dict) -> float | None:
    """A lower bound on the wall time of a segment that stopped early: from its start to the last file written in
    ``workdir`` (but those every segment rewrites when it starts), or None when its start is unknown."""
    begun = segment.get("started_unix")
    if begun is None and segment.get("started_utc"):  # segments recorded before started_unix existed
        begun = calendar.timegm(time.strptime(segment["started_utc"], "%Y-%m-%dT%H:%M:%SZ"))
    if begun is None:
        return None
    last = begun
    for dirpath, _, names in os.walk(workdir):
        for name in names:
            if dirpath == workdir and name in _WRITTEN_AT_START:
                continue
            try:
                last = max(last, os.stat(os.path.join(dirpath, name)).st_mtime)
            except OSError:
                pass  # deleted while we looked (a temporary file)
    return round(last - begun, 1)


def open_segment(workdir: str, entry: dict) -> list:
    """Appends this process's segment ``entry`` (commit, code hash, start) to ``segments.json``, after giving the
    last segment, if it stopped early, its ``seconds_at_least``. Returns the segments."""
    segments = read_segments(workdir)
    if segments and not segments[-1]["finished"] and "seconds_at_least" not in segments[-1]:
        segments[-1]["seconds_at_least"] = _seconds_at_least(workdir, segments[-1])
    segments.append({**entry, "seconds": None, "finished": False, "resumed": False,
                     "started_unix": round(time.time(), 1)})
    atomic_write_json(os.path.join(workdir, SEGMENTS), strict_json(segments))
    return segments


def _run_workdir(path: str) -> str | None:
    """The nearest folder at or above ``path`` that holds ``segments.json`` (the workdir of the run that holds
    ``path``), or None."""
    here = os.path.abspath(path)
    while True:
        if os.path.isfile(os.path.join(here, SEGMENTS)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def mark_resumed(store: str) -> None:
    """Records that the process working in the run holding ``store`` (a keyed directory found with content: what an
    earlier segment stored) resumed it: ``resumed`` of that run's open segment (the last, unfinished one) in its
    ``segments.json``. A store in no run's workdir, or in one whose last segment is finished, records nothing."""
    workdir = _run_workdir(os.path.dirname(os.path.abspath(store)))
    if workdir is None:
        return
    segments = read_segments(workdir)
    if segments and not segments[-1]["finished"] and not segments[-1].get("resumed"):
        segments[-1]["resumed"] = True
        atomic_write_json(os.path.join(workdir, SEGMENTS), strict_json(segments))


def resumed(workdir: str) -> bool:
    """Whether the open (last) segment of ``workdir`` resumed anything that earlier segments stored in it
    (:func:`mark_resumed`)."""
    segments = read_segments(workdir)
    return bool(segments and segments[-1].get("resumed"))


def close_segment(workdir: str, seconds: float) -> tuple[list, WallTime]:
    """Records this process's segment as finished after ``seconds`` (with ``resumed``: whether it used what earlier
    segments stored, :func:`mark_resumed`). Returns the segments and the run's total (:func:`total_wall_time`)."""
    segments = read_segments(workdir)
    here = resumed(workdir)
    if segments and not segments[-1]["finished"]:
        segments[-1].update(seconds=round(seconds, 1), finished=True, resumed=here)
        atomic_write_json(os.path.join(workdir, SEGMENTS), strict_json(segments))
    return segments, total_wall_time(segments[:-1], seconds, here)


def total_wall_time(earlier: list, here: float, resumed: bool = True) -> WallTime:
    """:class:`WallTime` of a run whose segments before this process's are ``earlier``; this one has run ``here``
    seconds. A process that resumed nothing they stored (``resumed`` False: a rerun that recomputed everything)
    made the run alone: its own seconds.

    >>> total_wall_time([{"seconds": 60.0}, {"seconds": None, "seconds_at_least": 30.0}], 10.0)
    WallTime(seconds=100.0, segments=3, complete=False, this_segment=10.0)
    >>> total_wall_time([{"seconds": 60.0}], 10.0, resumed=False)
    WallTime(seconds=10.0, segments=1, complete=True, this_segment=10.0)
    """
    earlier = earlier if resumed else []
    known = [s.get("seconds") if s.get("seconds") is not None else s.get("seconds_at_least") for s in earlier]
    complete = all(s.get("seconds") is not None for s in earlier)
    return WallTime(seconds=round(sum(k or 0.0 for k in known) + here, 1), segments=len(earlier) + 1,
                    complete=complete, this_segment=round(here, 1))


def _seconds_cell(s: dict) -> str:
    if s.get("seconds") is not None:
        return str(s["seconds"])
    return "—" if s.get("seconds_at_least") is None else f">= {s['seconds_at_least']}"


def segments_markdown(segments: list, total: WallTime) -> str:
    """report.md's Segments section (empty for a run of one segment): a row per segment and the total."""
    if len(segments) < 2:
        return ""
    rows = [f"| {i + 1} | {(s.get('commit') or 'unknown')[:10]} | {s.get('code_hash')} | {s.get('started_utc')} | "
            f"{_seconds_cell(s)} | {'yes' if s.get('finished') else 'no'} |" for i, s in enumerate(segments)]
    alone = (f"the last process alone, which resumed nothing the earlier ones stored"
             if total.segments < len(segments) else "the sum over the segments")
    return ("\n\n## Segments\n\nSeveral processes worked in this run's workdir, each resuming what the earlier ones "
            "stored (a segment that stopped early shows `>=` the time to the last file it wrote, `—` when that is "
            "unknown):\n\n"
            "| segment | commit | code hash | started (UTC) | seconds | finished |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + f"\n\nTotal wall time: {total.text()} ({total.seconds} s, {alone}; `wall_time_s` in "
            "config.json).\n")
