"""The house's layout (issues 22 and 37): the old validation shims and the old report modules are gone, no module is a
re-export shim (a name is imported from the module that defines it, or from its package's ``__init__``, the public
API), each package's ``__all__`` imports and is documented, and long modules say why. The layer and private-name
rules are in test_layers.py."""

import ast
import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

import recon_jax

ROOT = pathlib.Path(recon_jax.__file__).parent


def test_the_old_validation_shims_are_gone():
    assert not (ROOT / "bounds" / "_validate.py").exists()
    assert not (ROOT / "accounting" / "_checks.py").exists()


def test_report_holds_the_risk_application_only():
    """Issue 37 item 5: the run harness is ``recon_jax.evidence``, ``recon_jax.report`` the risk application (its
    modules named for what they are, none colliding with a module of another package), one paper's figures live
    beside their experiment; the old module paths are gone, with no shim left behind."""
    report = {p.stem for p in (ROOT / "report").glob("*.py")}
    assert report == {"__init__", "app", "command_line", "config", "figure", "reading", "setup", "sizes", "text",
                      "updates"}
    evidence = {p.stem for p in (ROOT / "evidence").glob("*.py")}
    assert evidence == {"__init__", "run", "segments", "claims", "config_checks", "launcher", "markdown", "plots",
                        "progress", "hcr_figures"}
    elsewhere = {p.stem for p in ROOT.rglob("*.py") if p.parent.name not in ("report", "evidence")}
    assert not ((report | evidence) - {"__init__"}) & elsewhere
    assert (ROOT.parent / "experiments" / "balle_figures.py").exists()
    for name in ("evidence", "cli", "claims", "markdown", "plots", "progress", "hcr", "balle", "risk", "risk_cli",
                 "risk_config", "risk_report", "risk_setup", "risk_sizes", "risk_text", "risk_updates"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"recon_jax.report.{name}")


def test_long_modules_say_why_they_are_one_concern():
    """A module above ~500 lines is split by concern or says in its docstring why it is one (issue 22)."""

    long = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 520 and "one concern" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert not long, f"modules above ~500 lines without a 'one concern' justification: {long}"


def _package_names() -> list[str]:
    return ["recon_jax"] + sorted(f"recon_jax.{i.name}" for i in pkgutil.iter_modules([str(ROOT)]) if i.ispkg)


def _documented_constant(package, name: str) -> bool:
    """Whether ``name`` is mentioned in the package's docstring, or a recon_jax module that assigns it at top level
    mentions it in its docstring or has a ``#:`` doc-comment right above the assignment (how constants are
    documented: they have no docstring of their own)."""
    docs = [package.__doc__ or ""]
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        tree, lines = ast.parse(text), text.splitlines()
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                if node.lineno >= 2 and lines[node.lineno - 2].lstrip().startswith("#:"):
                    return True
                docs.append(ast.get_docstring(tree) or "")
    return any(re.search(rf"\b{re.escape(name)}\b", d) for d in docs)


@pytest.mark.parametrize("package_name", _package_names())
def test_each_package_api_is_importable_and_documented(package_name):
    """A package's ``__init__`` is its public API: ``__all__`` imports, every name in it is there, and each has a
    docstring (functions, classes, modules) or is a constant its package or defining module documents."""
    package = importlib.import_module(package_name)
    assert isinstance(getattr(package, "__all__", None), (list, tuple)) and package.__all__, package_name
    assert len(set(package.__all__)) == len(package.__all__), f"{package_name}.__all__ lists a name twice"
    namespace = {}
    exec(f"from {package_name} import *", namespace)  # noqa: S102 -- the star import itself is what is tested
    undocumented = []
    for name in package.__all__:
        obj = namespace[name]
        if inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj):
            if len((obj.__doc__ or "").strip()) < 20:
                undocumented.append(name)
        elif not _documented_constant(package, name):
            undocumented.append(name)
    assert not undocumented, f"{package_name}: names without documentation: {undocumented}"


def _module_exports(path: pathlib.Path) -> tuple[set[str], set[str]] | None:
    """``(own, foreign)`` names of a module's literal ``__all__``: defined at its top level, or imported from
    recon_jax and not defined (None without a literal ``__all__``)."""
    tree = ast.parse(path.read_text())
    defined, imported, exported = set(), set(), None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                try:
                    exported = set(ast.literal_eval(node.value))
                except ValueError:
                    exported = None
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("recon_jax")):
            imported |= {a.asname or a.name for a in node.names}
    if exported is None:
        return None
    return exported & defined, {n for n in exported if n in imported and n not in defined}


def test_no_module_is_a_reexport_shim():
    """A module other than a package ``__init__`` exports at least as many names it defines as names it imports
    (the house rule of ``house_metrics.py``): callers import a name from the module that defines it, or from the
    package's ``__init__``."""
    shims = []
    for path in sorted(ROOT.rglob("*.py")):
        exports = None if path.name == "__init__.py" else _module_exports(path)
        if exports is not None and len(exports[1]) > len(exports[0]):
            shims.append(f"{path.relative_to(ROOT)}: re-exports {sorted(exports[1])}, defines {sorted(exports[0])}")
    assert not shims, shims


def test_the_shim_check_can_fail(tmp_path):
    path = tmp_path / "shim.py"
    path.write_text("from recon_jax.bounds.dct import dctn_ortho, idctn_ortho\n\n"
                    "__all__ = ['dctn_ortho', 'idctn_ortho', 'own']\n\n\ndef own():\n    pass\n")
    own, foreign = _module_exports(path)
    assert own == {"own"} and foreign == {"dctn_ortho", "idctn_ortho"}


def test_the_wheel_holds_only_recon_jax_and_its_console_script():
    """pyproject's package discovery finds recon_jax and its subpackages only (no top-level experiments or
    benchmarks), and the console script and its default config live in the package."""
    import importlib
    import os
    import tomllib

    import setuptools

    root = ROOT.parent
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    found = setuptools.find_packages(where=str(root), include=meta["tool"]["setuptools"]["packages"]["find"]["include"])
    assert "recon_jax" in found and {p.split(".")[0] for p in found} == {"recon_jax"}, found
    module, _, attr = meta["project"]["scripts"]["recon-jax-report"].partition(":")
    assert module.split(".")[0] == "recon_jax"
    report = importlib.import_module(module)
    assert callable(getattr(report, attr))
    config_file = report.DEFAULT_CONFIG.rpartition(":")[0]
    assert os.path.isfile(config_file) and pathlib.Path(config_file).resolve().is_relative_to(ROOT.resolve())


def test_experiment_entry_points_are_the_package_report():
    from experiments import risk_report
    from experiments.configs import risk_report as config

    from recon_jax import report
    from recon_jax.report import app
    from recon_jax.report import config as home_config

    assert risk_report.run is app.run is report.run and risk_report.console_main is app.console_main
    assert config.get_config is home_config.get_config is report.get_config
