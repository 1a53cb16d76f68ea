"""The install tells the truth (issue 36): README's Python claim is pyproject's ``requires-python`` and the version the
lock was made with; every pin of ``requirements.lock`` lies in the ranges pyproject declares (so ``pip install -c
requirements.lock .``, which ``make`` and CI run, resolves to the lock, and a wheel installed elsewhere keeps any
in-range jax); pyproject declares ranges, never exact pins. ``make install`` runs ``pip check`` on the result."""

import pathlib
import re
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]
META = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _lock() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_norm(name)] = Version(version.strip())
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[Requirement]:
    reqs = [Requirement(r) for r in META["dependencies"]]
    for extra, items in META["optional-dependencies"].items():
        if extra not in ("cuda12", "cuda13", "tpu"):  # accelerator wheels: not in the CPU lock
            reqs += [Requirement(r) for r in items]
    return reqs


def test_readme_python_claim_is_requires_python_and_the_locks():
    readme = (ROOT / "README.md").read_text()
    claims = set(re.findall(r"Python >= (3\.\d+)", readme))
    assert len(claims) == 1, claims
    (claim,) = claims
    assert SpecifierSet(META["requires-python"]) == SpecifierSet(f">={claim}")
    header = (ROOT / "requirements.lock").read_text().splitlines()[0]
    assert f"(Python {claim}, CPU)" in header  # the lock is the set at the lowest Python the README claims
    assert Version(".".join(map(str, sys.version_info[:3]))) in SpecifierSet(META["requires-python"])


@pytest.mark.parametrize("req", _requirements(), ids=lambda r: r.name)
def test_every_lock_pin_lies_in_the_declared_range(req):
    pins = _lock()
    assert _norm(req.name) in pins, f"{req.name} is declared but not pinned in requirements.lock"
    assert req.specifier, f"{req.name} has no range in pyproject.toml"
    assert not any(s.operator in ("==", "===") for s in req.specifier), f"{req} pins a version in pyproject.toml"
    assert pins[_norm(req.name)] in req.specifier, f"requirements.lock pins {req.name}=={pins[_norm(req.name)]}"


def test_installing_into_an_environment_keeps_its_in_range_packages(tmp_path):
    """What ``pip install recon-jax`` does to an environment that already holds in-range packages: pip resolves the
    wheel's requirements (pyproject's ranges, which become its Requires-Dist) against the installed set offline
    (``--no-index``) and plans to install nothing, so an existing jax stays. Here the installed set is the lock's
    (the one supported jax that installs on this machine); the H200's device check ran the library on its image's
    jax 0.11 the same way."""
    import json
    import subprocess
    from importlib import metadata

    pins = _lock()
    differ = []
    for req in (Requirement(r) for r in META["dependencies"]):
        try:
            have = Version(metadata.version(req.name))
        except metadata.PackageNotFoundError:
            have = None
        if have != pins.get(_norm(req.name)):
            differ.append(f"{req.name} {have} (lock {pins.get(_norm(req.name))})")
    if differ:  # e.g. an accelerator image with its own packages, the library's extras carried beside it
        pytest.skip("this environment is not the lock's set, the premise of this test: " + ", ".join(differ))

    reqs = tmp_path / "requirements.txt"
    reqs.write_text("\n".join(str(r) for r in META["dependencies"]) + "\n")
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report",
                    str(report), "-r", str(reqs)], check=True, capture_output=True, text=True, timeout=120)
    planned = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert planned == [], f"pip would install or replace {planned} in an environment made from requirements.lock"
