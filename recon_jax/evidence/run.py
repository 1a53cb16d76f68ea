"""The record of a run: provenance, NaN refusal, keyed caches, segments, publishing.

Used by the risk report (:mod:`recon_jax.report.app`) and, through ``experiments/common.py``, by every
experiment of the repository. Every run's ``run(config, workdir)`` follows the same shape::

    run_info = start_run(workdir, config, seed=config.seed)   # config.json with commit, machine, versions
    ...                                                       # require_finite(...) on losses, models, metrics
    claims = [claim("attack beats the oracle", detail=f"mean MSE {mse:.4f} vs oracle {oracle:.4f}",
                    comparisons=[paired_comparison("MSE - oracle MSE", mse_per_target, oracle_per_target, "<=",
                                                   alpha=0.05)])]           # verdict: holds / fails / undecided
    return finish_run(run_info, metrics, report_text, claims)  # report.md (+ Claims), metrics.json, wall time

Claims and their verdicts (``claim``, ``comparison``) live in :mod:`recon_jax.evidence.claims`; the package
(:mod:`recon_jax.evidence`) exports both modules' names. Caches and resume points live in
``keyed_dir(workdir, name, key)``, whose name is a hash of everything that
determines their content, so a rerun with another config in the same workdir recomputes instead of reporting the
old numbers. Each such directory also records the code that filled it (:func:`code_fingerprint`: a hash of the
library's and the experiments' source, with the git commit and uncommitted files for people): resuming from one
written by other code is refused (:class:`ResumeAcrossCodeError`) unless asked for (``--allow_resume_across_code``,
:func:`allow_resume_across_code`). Every process that works in a workdir is a *segment* (``segments.json``: commit,
code hash, start, wall time: :mod:`recon_jax.evidence.segments`); metrics.json lists them, and report.md does when
there was more than one, with their total (:func:`wall_time`; config.json's ``wall_time_s`` is that total).
``publish(workdir, results_dir)`` copies a finished run's report, metrics, config and the figures its metrics list
(``figures``) to ``results/<experiment>/<variant>/`` (``make results EXP=name``).
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.metadata
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from recon_jax import io as recon_io
from recon_jax.io import (atomic_write_json, atomic_write_text, code_record, resume_across_code_allowed, stable_hash,
                          strict_json)
from recon_jax.evidence.claims import check_claims, claims_markdown
from recon_jax.evidence.segments import (WallTime, close_segment, mark_resumed, open_segment, read_segments, resumed,
                                         segments_markdown, total_wall_time)

__all__ = [
    "prepare_workdir",
    "config_to_dict",
    "write_run_info",
    "RunInfo",
    "start_run",
    "finish_run",
    "wall_time",
    "NonFiniteResult",
    "require_finite",
    "keyed_dir",
    "stored_result",
    "StoredResult",
    "code_fingerprint",
    "allow_resume_across_code",
    "ResumeAcrossCodeError",
    "provenance",
    "publish",
]

_PACKAGES = ("jax", "jaxlib", "flax", "optax", "dm-haiku", "numpy", "scipy", "dp-accounting", "scikit-learn",
             "umap-learn", "recon-jax")


def config_to_dict(config: Any) -> dict:
    """Converts an ml_collections ConfigDict (or a dict) to plain JSON-able Python objects."""
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return dict(config)


def workdir_problem(workdir: str) -> str | None:
    """Why ``workdir`` cannot hold a run (``"<path> is a file, not a folder"``), or None: the one check behind
    :func:`prepare_workdir`'s ValueError and the command line's one-line message."""
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        return f"{workdir} is a file, not a folder"
    return None


def prepare_workdir(workdir: str) -> str:
    """Creates ``workdir`` (and parents) and returns its absolute path.

    Raises:
      ValueError: ``workdir`` is an existing file.
    """
    workdir = os.path.abspath(workdir)
    problem = workdir_problem(workdir)
    if problem:
        raise ValueError(f"workdir {problem}")
    os.makedirs(workdir, exist_ok=True)
    return workdir


def _git(*args: str) -> str | None:
    """git's output in the checkout this package was imported from, or ``None`` when it was not imported from
    one (an installed wheel: its directory is no checkout's root, even when a checkout encloses it). Not
    stripped: ``status --porcelain`` lines begin with a two-letter status in which a space is significant."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # not a git checkout (an installed wheel): recorded as unknown, never guessed
    return out.stdout


def _dirty_files(status: str) -> list[str]:
    r"""Changed tracked files from ``git status --porcelain`` output, without committed results and run outputs.

    >>> _dirty_files(" M results/x/default/metrics.json\n M recon_jax/io.py\nM  runs/a\n")
    ['recon_jax/io.py']
    """
    paths = [line[3:] for line in status.splitlines() if len(line) > 3]
    return [p for p in paths if p.split("/")[0] not in ("results", "runs")]


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                out[key.strip()] = value.strip()
    except OSError:
        pass
    return out


def _cpu_model(info: dict[str, str]) -> str:
    """The CPU's model name (``info``: :func:`_cpuinfo`), else what ``platform`` knows."""
    return info.get("model name") or platform.processor() or platform.machine()


# The instruction sets XLA:CPU chooses kernels by: two CPUs whose "model name" is the same ("AMD EPYC") can differ in
# them, and then train different weights from the same seed.
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def _cpu_isa(info: dict[str, str]) -> dict | None:
    """CPU vendor, family, model and the SIMD instruction sets of :data:`_ISA_FLAGS` it has (``info``:
    :func:`_cpuinfo`; x86 Linux, None elsewhere)."""
    if "flags" not in info:
        return None
    flags = set(info["flags"].split())
    return {"vendor": info.get("vendor_id"), "family": info.get("cpu family"), "model": info.get("model"),
            "simd": [f for f in _ISA_FLAGS if f in flags]}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance() -> dict:
    """Where and with what a run was made: git commit (and whether the tree had uncommitted changes), date,
    machine (CPU model, cores, memory, accelerators), Python and package versions."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None else _dirty_files(status)
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        mem_gib = None
    devices = jax.devices()
    cpu = _cpuinfo()
    commit = (_git("rev-parse", "HEAD") or "").strip() or None
    stated = {}
    if os.environ.get("RECON_JAX_GIT_COMMIT"):
        # A copy of a checkout made elsewhere (an accelerator machine's copy of the working tree), whose .git is
        # missing or stale (one such copy carried the .git of an older checkout: its HEAD and "dirty files" named
        # the wrong commit): the commit is the one the caller states, recorded as stated; what git in the copy
        # says is kept beside it when it differs.
        stated = {"git_commit_source": "stated by the caller (RECON_JAX_GIT_COMMIT)"}
        if commit is not None and commit != os.environ["RECON_JAX_GIT_COMMIT"].strip():
            stated["git_view_of_this_copy"] = {"head": commit, "dirty_files": dirty}
            dirty = None
        commit = os.environ["RECON_JAX_GIT_COMMIT"].strip()
    return {
        "git_commit": commit,
        **stated,
        "git_dirty_files": dirty,
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpu_model": _cpu_model(cpu),
            "cpu_isa": _cpu_isa(cpu),
            "cpu_count": os.cpu_count(),
            "memory_gib": mem_gib,
            "platform": platform.platform(),
            "jax_backend": jax.default_backend(),
            "accelerators": sorted({d.device_kind for d in devices if d.platform != "cpu"}),
            "devices": [str(d) for d in devices],
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        },
        "versions": {"python": sys.version.split()[0], **{p: _version(p) for p in _PACKAGES}},
        "argv": sys.argv,
        "load_average_1min": _load(),
    }


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)  # > the core count: the machine was shared, wall times are upper estimates
    except OSError:
        return None


def write_run_info(workdir: str, config: Any, seed: int | None = None, extra: dict | None = None) -> dict:
    """Writes ``config.json`` with the resolved config, seed and :func:`provenance`. Returns what it wrote."""
    info = {
        "config": config_to_dict(config),
        "seed": seed,
        "jax_version": jax.__version__,
        **provenance(),
    }
    if extra:
        info.update(extra)
    atomic_write_json(os.path.join(workdir, "config.json"), strict_json(info))
    return info


@dataclasses.dataclass
class RunInfo:
    """What :func:`start_run` recorded: the workdir, the config.json contents and the start time."""

    workdir: str
    info: dict
    start: float


def start_run(workdir: str, config: Any, seed: int | None = None, extra: dict | None = None) -> RunInfo:
    """Creates ``workdir``, writes ``config.json`` (config, seed, provenance), starts the wall clock and opens a
    segment in ``segments.json`` (this process's commit, code hash and start time)."""
    start = time.perf_counter()
    workdir = prepare_workdir(workdir)
    info = write_run_info(workdir, config, seed=seed, extra=extra)
    open_segment(workdir, {"commit": info.get("git_commit"), "dirty_files": info.get("git_dirty_files"),
                           "code_hash": code_fingerprint(), "started_utc": info.get("time_utc")})
    return RunInfo(workdir=workdir, info=info, start=start)


def wall_time(run: RunInfo) -> WallTime:
    """The run's wall time so far, over every segment of its workdir (this one up to now), or this segment's alone
    when it resumed nothing the earlier ones stored (no :func:`keyed_dir` of the workdir had content): for a report's
    total time, written before :func:`finish_run`, which records the same sum as config.json's ``wall_time_s``."""
    return total_wall_time(read_segments(run.workdir)[:-1], time.perf_counter() - run.start, resumed(run.workdir))


def _source_roots() -> list[str]:
    """The source whose change can change a result: the recon_jax package and, in a checkout, experiments/."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [pkg, os.path.join(os.path.dirname(pkg), "experiments")]


def code_fingerprint() -> str:
    """The fingerprint (16 hex characters) of the library's and the experiments' Python source as it is on disk,
    with the Python version and the versions of the packages whose numerics the results rest on: the
    ``fingerprint`` of :func:`recon_jax.io.code_record` over both folders.

    It keys resume points by code (git commits alone miss uncommitted edits and copies without ``.git``; a jax or
    flax upgrade can move trained weights as an edit can); computed once per process. The library's own stores
    record :func:`recon_jax.io.library_code`, which leaves the experiments (and this harness) out.

    >>> len(code_fingerprint())
    16
    """
    return code_record(_source_roots())["fingerprint"]


class ResumeAcrossCodeError(ValueError):
    """A resume point was written by other code than the code running now."""


def allow_resume_across_code(allow: bool = True) -> None:
    """Lets :func:`keyed_dir` resume from directories written by other code (``--allow_resume_across_code``); the
    run's ``segments`` then show which code made which part. The same switch
    (:func:`recon_jax.io.allow_resume_across_code`) lets the library's stores inside such directories resume."""
    recon_io.allow_resume_across_code(allow)


class NonFiniteResult(FloatingPointError):
    """A model, loss or metric is NaN or infinite: the run stops instead of reporting it."""


def require_finite(value: Any, what: str, hint: str = "") -> None:
    """Raises :class:`NonFiniteResult` naming ``what`` (and ``hint``) if any leaf of ``value`` is NaN or inf.

    >>> require_finite({"loss": 1.0}, "training loss")
    >>> require_finite([1.0, float("nan")], "training loss", "learning rate too large?")
    Traceback (most recent call last):
    ...
    recon_jax.evidence.run.NonFiniteResult: training loss is not finite (1 of 2 values NaN or inf); learning rate too large?
    """
    leaves = jax.tree_util.tree_leaves(value)
    bad = total = 0
    for leaf in leaves:
        arr = np.asarray(leaf)
        if not np.issubdtype(arr.dtype, np.number):
            continue
        total += arr.size
        bad += int(arr.size - np.count_nonzero(np.isfinite(arr)))
    if bad:
        msg = f"{what} is not finite ({bad} of {total} values NaN or inf)"
        raise NonFiniteResult(msg + (f"; {hint}" if hint else ""))


def finish_run(run: RunInfo, metrics: dict, report: str, claims: list[dict], *, smoke_banner: bool = True) -> dict:
    """Writes the run's outputs: report.md with a Claims section, metrics.json (with ``claims``; strict JSON,
    NaN refused naming its key, +-inf as ``"inf"``/``"-inf"``), and the wall time into config.json: ``wall_time_s``
    sums every segment of the workdir (:func:`wall_time`; ``wall_time_segments`` of them, ``wall_time_complete``
    False when a segment that stopped early counts with its lower bound; this segment alone when it resumed nothing),
    ``segment_wall_time_s`` is this process's.

    Every claim carries a verdict (holds / fails / undecided: :func:`~recon_jax.evidence.claims.claim` with
    ``comparisons`` or ``verdict``); the verdict-less form ``claim(name, holds, detail)`` survives only in results
    committed before verdicts existed, and a new run is refused it. A run of a ``smoke`` variant says under its
    report's title that its verdicts describe the run, not the paper's findings (``smoke_banner=False``: the
    report says how far it can decide in its own words, as the risk report does).

    Returns the metrics as written.

    Raises:
      ValueError: a claim without a verdict, or a figure listed (``figures``, for :func:`publish`) but not written.
    """
    _run_figures(run.workdir, metrics)
    if claims and not check_claims(claims):
        raise ValueError("every claim of a run needs a verdict: claim(name, detail=..., comparisons=[...]) or "
                         f"claim(name, holds, detail, verdict=...); got {claims[0]['name']!r} without one")
    metrics = dict(metrics)
    metrics["claims"] = list(claims)
    wall = time.perf_counter() - run.start
    segments, total = close_segment(run.workdir, wall)
    metrics["segments"] = segments
    try:
        safe = strict_json(metrics)
    except ValueError as err:
        raise NonFiniteResult(f"{err} (in metrics.json of {run.workdir})") from None
    report = report.rstrip("\n")
    text = ((_with_smoke_banner(report, run.info) if smoke_banner else report) + "\n\n" + claims_markdown(claims)
            + segments_markdown(segments, total) + _machine_markdown(run.info))
    atomic_write_text(os.path.join(run.workdir, "report.md"), text)
    atomic_write_json(os.path.join(run.workdir, "metrics.json"), safe)
    info = dict(run.info, wall_time_s=total.seconds, wall_time_segments=total.segments,
                wall_time_complete=total.complete, segment_wall_time_s=round(wall, 1),
                finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), load_average_1min_end=_load())
    atomic_write_json(os.path.join(run.workdir, "config.json"), strict_json(info))
    run.info = info
    return safe


_SMOKE_BANNER = ("**Smoke sizes.** The `{variant}` variant is a check of the code, sized to finish in minutes on a CPU "
                "and far below the paper's sizes: its numbers and verdicts describe this run only and do not test "
                "the paper's findings (the `default` and `paper` variants do).")


def _with_smoke_banner(report: str, info: dict) -> str:
    """``report`` with the smoke banner after its title line when the run's config is a ``smoke`` or ``ci`` variant."""
    variant = (info.get("config") or {}).get("variant")
    if variant not in ("smoke", "ci"):
        return report
    title, _, rest = report.partition("\n") if report.startswith("#") else ("", "", report)
    body = f"{_SMOKE_BANNER.format(variant=variant)}\n\n{rest.lstrip(chr(10))}"
    return f"{title}\n\n{body}" if title else body


def _machine_markdown(info: dict) -> str:
    """Where the run was made, and what that means for reproducing it."""
    m = info.get("machine") or {}
    where = (", ".join(m.get("accelerators") or [])
             or f"{m.get('cpu_model') or 'unknown CPU'} ({m.get('cpu_count')} cores)")
    isa = m.get("cpu_isa") or {}
    if not m.get("accelerators") and isa.get("simd"):
        where += f", {'/'.join(isa['simd'])}"
    commit = (info.get("git_commit") or "unknown")[:10]
    return (f"\n\nMade at commit {commit} on {where}, jax {info.get('versions', {}).get('jax')} "
            f"({m.get('jax_backend')} backend). A rerun on another CPU type or accelerator is not bit for bit the "
            "same: the compiler picks other kernels and summation orders there. Where the run trains a model, the "
            "trained weights then differ as they would between training seeds, and numbers resting on them can "
            "move by more than the intervals stated here, which count the sampling of test examples only.\n")


def keyed_dir(workdir: str, name: str, key: Any) -> str:
    """A cache or resume directory ``workdir/<name>-<hash of key>``; writes ``key.json`` and ``code.json`` inside.

    Everything that determines the directory's content must be in ``key`` (config fields, data, seeds), so a run
    with another config never finds, and never reports, the old results. ``code.json`` records the code that fills
    the directory (:func:`code_fingerprint`, commit, uncommitted files); content written by other code is refused
    (:class:`ResumeAcrossCodeError`) unless :func:`allow_resume_across_code` was called. A directory found with
    content is recorded as resumed in the open segment of the run whose workdir holds it (:func:`wall_time` reads
    it: :func:`recon_jax.evidence.segments.mark_resumed`).
    """
    digest = stable_hash(key)[:16]
    path = os.path.join(workdir, f"{name}-{digest}")
    os.makedirs(path, exist_ok=True)
    key_file = os.path.join(path, "key.json")
    if not os.path.exists(key_file):
        atomic_write_json(key_file, json.loads(json.dumps(key, sort_keys=True, default=str)))
    code_file = os.path.join(path, "code.json")
    here = code_fingerprint()
    written = json.loads(pathlib.Path(code_file).read_text()) if os.path.exists(code_file) else None
    has_content = any(n not in ("key.json", "code.json") for n in os.listdir(path))
    if has_content:
        mark_resumed(path)  # in the open segment of the run whose workdir holds path (segments.json)
    if has_content and (written is None or written.get("code_hash") != here) and not resume_across_code_allowed():
        commit = (written or {}).get("commit")
        diff = f"; `git diff {commit} -- recon_jax experiments` shows the edits since" if commit else ""
        by = (f"code {written.get('code_hash')} (commit {commit}{diff})" if written
              else "code of unknown version (no code.json)")
        raise ResumeAcrossCodeError(
            f"{path} was written by {by}, not by the code running now ({here}): its content may differ from what "
            "this code computes (edits of comments and docstrings alone do not count). Delete it to recompute, or "
            "resume anyway with --allow_resume_across_code (the run's segments record which code made which part).")
    if written is None or written.get("code_hash") != here:
        commit = (_git("rev-parse", "HEAD") or "").strip() or os.environ.get("RECON_JAX_GIT_COMMIT") or None
        status = _git("status", "--porcelain", "--untracked-files=no")
        atomic_write_json(code_file, {"code_hash": here, "commit": commit, "resumed_from": written,
                                      "dirty_files": None if status is None else _dirty_files(status),
                                      "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return path


_RESULT = "result.json"


def _plain(obj: Any) -> Any:
    """Arrays and NumPy or JAX scalars as JSON's lists and numbers."""
    if isinstance(obj, np.generic) or hasattr(obj, "__array__"):
        return np.asarray(obj).tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


class StoredResult(NamedTuple):
    """What :func:`stored_result` returns: the result, whether it was read from an earlier run, and its folder."""

    value: Any
    resumed: bool
    path: str


def stored_result(workdir: str, name: str, key: Any, compute: Callable[[], Any]) -> StoredResult:
    """A phase's JSON result, kept in ``keyed_dir(workdir, name, key)``: read from there when an earlier run of the
    same key stored it, else ``compute()``d and stored (atomically).

    ``key`` holds everything that determines the result (:func:`keyed_dir`). The result is returned as it reads
    back from JSON (lists for tuples, plain floats, +-inf kept), so a run that computes it and one that resumes it
    continue from equal values. A result holding a NaN is returned but never stored (:func:`require_finite` and
    :func:`finish_run` refuse it later, naming it).
    """
    folder = keyed_dir(workdir, name, key)
    path = os.path.join(folder, _RESULT)
    if os.path.exists(path):
        with open(path) as f:
            return StoredResult(json.load(f), True, folder)
    result = json.loads(json.dumps(compute(), default=_plain))
    try:
        strict_json(result)  # raises on a NaN, naming its key
    except ValueError:
        return StoredResult(result, False, folder)
    atomic_write_json(path, result)
    return StoredResult(result, False, folder)


_PUBLISHED = ("report.md", "metrics.json", "config.json")


def _run_figures(workdir: str, metrics: dict) -> list[str]:
    """The figures a run lists in its metrics (``figures``: file names, or a dict name -> file name), each checked
    to be a file at the top of ``workdir`` (ValueError otherwise): what :func:`publish` copies."""
    figures = metrics.get("figures") or []
    names = list(figures.values()) if isinstance(figures, dict) else list(figures)
    bad = [n for n in names if not isinstance(n, str) or os.path.basename(n) != n or n in _PUBLISHED
           or not os.path.isfile(os.path.join(workdir, n))]
    if bad:
        raise ValueError(f"the run in {workdir} lists figures that are not files of its folder: {bad}")
    return names


def publish(workdir: str, results_dir: str) -> list[str]:
    """Copies a finished run (report.md, metrics.json, config.json and the figures its metrics list under
    ``figures``, not other PNGs an earlier run left in the workdir) to ``results_dir``, whose files it replaces.

    Refuses a run whose config.json has no wall time (it did not finish), whose metrics have no claims, list a
    figure the workdir lacks, or list none while the workdir holds PNGs (made before runs listed their figures, so
    its PNGs cannot be told from an earlier run's: rerun it). Returns the copied file names.
    """
    with open(os.path.join(workdir, "config.json")) as f:
        info = json.load(f)
    if "wall_time_s" not in info:
        raise ValueError(f"{workdir} holds no finished run (config.json has no wall_time_s)")
    with open(os.path.join(workdir, "metrics.json")) as f:
        metrics = json.load(f)
    if "claims" not in metrics:
        raise ValueError(f"{workdir}/metrics.json has no claims")
    pngs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(workdir, "*.png")))
    if "figures" not in metrics and pngs:
        raise ValueError(f"{workdir}/metrics.json lists no figures and the PNGs there ({', '.join(pngs)}) may be an "
                         "earlier run's; rerun it with the current code, which lists its figures")
    names = list(_PUBLISHED) + sorted(_run_figures(workdir, metrics))
    os.makedirs(results_dir, exist_ok=True)
    for old in glob.glob(os.path.join(results_dir, "*")):
        if os.path.isfile(old):
            os.unlink(old)
    for name in names:
        shutil.copy2(os.path.join(workdir, name), os.path.join(results_dir, name))
    return names
