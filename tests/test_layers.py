"""The import structure of ``recon_jax``: layers, no cycles, no private names across modules.

The package is layered (bottom to top)::

    data, special, metrics, io, threefry, _validation, testing  ->  models, mechanisms  ->  training, accounting, bounds
        ->  shadow  ->  attacks  ->  evidence  ->  report

(``evidence`` is the run harness every experiment and the risk report use; ``report`` is the risk application.)

A module may import from its own layer or any layer below, never above; the module graph (every import,
including those inside functions) has no cycle; and no module imports a private name (``_x``) defined in another
module. Package-private *modules* may be imported inside their own package, and ``recon_jax._validation`` (the
package-wide validation helpers) from anywhere.

This reads the source with ``ast`` (nothing is imported), so it checks imports that only run on some code paths.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "recon_jax"
LAYERS = (
    ("data", "special", "metrics", "io", "threefry", "_validation", "testing"),
    ("models", "mechanisms"),
    ("training", "accounting", "bounds"),
    ("shadow",),
    ("attacks",),
    ("evidence",),
    ("report",),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
SHARED_PRIVATE = {"recon_jax._validation"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
PACKAGES = {_module_name(p) for p in ROOT.rglob("__init__.py")}


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """``(module imported from, name imported or None, line)`` for every import of ``recon_jax`` in ``name``."""
    path = MODULES[name]
    package = name if name in PACKAGES else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "recon_jax"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] == "recon_jax":
                out += [(source, a.name, node.lineno) for a in node.names]
    return out


def _top(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def _reexports(package: str) -> dict[str, str]:
    """``{name: module defining it}`` for the names a package's ``__init__`` imports from its modules."""
    return {alias: source for source, alias, _ in _imports(package) if alias is not None and source in MODULES}


def _target(source: str, alias: str | None) -> str:
    """The module an import really reaches: a submodule, or the module a package re-exports the name from."""
    if alias is not None and f"{source}.{alias}" in MODULES:
        return f"{source}.{alias}"
    if alias is not None and source in PACKAGES:
        return _reexports(source).get(alias, source)
    return source


def test_the_walk_sees_the_package():
    assert {"recon_jax.training.train", "recon_jax.attacks.reconn", "recon_jax.models.adapters",
            "recon_jax.evidence.run", "recon_jax.report.app"} <= set(MODULES)
    assert any(alias == "ModelFns" for _, alias, _ in _imports("recon_jax.training.dp"))
    assert ("recon_jax.evidence.run", "require_finite") in {(s, a) for s, a, _ in _imports("recon_jax.report.updates")}


@pytest.mark.parametrize("name", [m for m in MODULES if _top(m) is not None])
def test_no_upward_import(name):
    here = _top(name)
    assert here in RANK, f"{name}: package {here!r} has no layer; add it to LAYERS"
    upward = [f"line {line}: {source}" + (f".{alias}" if alias else "")
              for source, alias, line in _imports(name)
              if _top(_target(source, alias)) is not None and RANK[_top(_target(source, alias))] > RANK[here]]
    assert not upward, f"{name} ({here}, layer {RANK[here]}) imports from a higher layer: {upward}"


@pytest.mark.parametrize("name", list(MODULES))
def test_no_private_name_from_another_module(name):
    package = name if name in PACKAGES else name.rpartition(".")[0]
    bad = []
    for source, alias, line in _imports(name):
        for part_owner, part in ([(source, alias)] if alias else []) + [
                (source.rpartition(".")[0], source.rpartition(".")[2])]:
            if not part.startswith("_") or part.startswith("__"):
                continue
            full = f"{part_owner}.{part}"
            if full in SHARED_PRIVATE:
                continue
            if full in MODULES and part_owner == package:
                continue  # a package-private module used inside its own package
            bad.append(f"line {line}: {full}")
    assert not bad, f"{name} imports private names of other modules: {sorted(set(bad))}"


def test_no_import_cycle():
    graph = {m: set() for m in MODULES if m not in PACKAGES}
    for m in graph:
        for source, alias, _ in _imports(m):
            target = _target(source, alias)
            if target in graph and target != m:
                graph[m].add(target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_checks_can_fail(tmp_path, monkeypatch):
    """The walk reports an upward import, a private name and a cycle when a module has them."""
    pkg = tmp_path / "recon_jax"
    for sub in ("models", "attacks"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "a.py").write_text("from recon_jax.attacks.b import f\n")
    (pkg / "attacks" / "b.py").write_text("from recon_jax.models.a import _g\n")
    monkeypatch.setitem(globals(), "ROOT", pkg)
    monkeypatch.setitem(globals(), "MODULES", {_module_name(p): p for p in sorted(pkg.rglob("*.py"))})
    monkeypatch.setitem(globals(), "PACKAGES", {_module_name(p) for p in pkg.rglob("__init__.py")})
    with pytest.raises(AssertionError, match="higher layer"):
        test_no_upward_import("recon_jax.models.a")
    with pytest.raises(AssertionError, match="private"):
        test_no_private_name_from_another_module("recon_jax.attacks.b")
    with pytest.raises(AssertionError, match="cycle"):
        test_no_import_cycle()


def test_store_code_records_leave_out_exactly_the_layers_above_their_fillers():
    """What a store's code record leaves out (recon_jax.io.library_code) is justified by these layers: no module of a
    layer above the code that fills a store can run while it fills (the imports above), so the engine's stores
    leave out the layers above ``shadow`` and the attacks' stores (DR shadow embeddings, reconstructor checkpoints)
    the layers above ``attacks``. A new layer must be placed in one of the records too."""
    from recon_jax.io import ABOVE_STORES
    from recon_jax.shadow.engine import ABOVE_ENGINE

    names = [name for layer in LAYERS for name in layer]
    assert set(ABOVE_STORES) == {n for n in names if RANK[n] > RANK["attacks"]}
    assert set(ABOVE_ENGINE) == {n for n in names if RANK[n] > RANK["shadow"]}
