"""Every public name of recon_jax has a docstring that ``help()`` renders (issue: docs for every public function)."""

import ast
import importlib
import inspect
import pathlib
import pkgutil
import pydoc
import re

import pytest

import recon_jax

_SKIP_MODULES = ()  # every public module counts


def _modules():
    mods = [recon_jax]
    for info in pkgutil.walk_packages(recon_jax.__path__, prefix="recon_jax."):
        if info.name.endswith("__main__") or info.name in _SKIP_MODULES:
            continue
        if any(part.startswith("_") for part in info.name.split(".")):
            continue  # private helper modules; what they export publicly is reached through public modules
        mods.append(importlib.import_module(info.name))
    return mods


def _public_objects():
    seen = {}
    for mod in _modules():
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue  # constants (tuples, dicts) document themselves in their module's docstring
            seen.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return sorted(seen.items())


PUBLIC = _public_objects()


def test_there_are_many_public_objects():
    # guards against the collection silently finding nothing
    assert len(PUBLIC) > 150
    names = {n.rsplit(".", 1)[-1] for n, _ in PUBLIC}
    assert {"rero_from_rdp_curve", "generate_shadow_models", "train", "informed_mia", "embed"} <= names


def test_every_module_has_a_docstring():
    every = [importlib.import_module(i.name) for i in pkgutil.walk_packages(recon_jax.__path__, prefix="recon_jax.")]
    missing = [m.__name__ for m in every if not (m.__doc__ or "").strip()]
    assert not missing, f"modules without a docstring: {missing}"


@pytest.mark.parametrize("qualname,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_object_documented_and_renders(qualname, obj):
    doc = inspect.getdoc(obj) or ""
    assert len(doc.strip()) >= 20, f"{qualname} has no (or a trivial) docstring"
    text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
    assert obj.__name__ in text
    assert doc.splitlines()[0].strip()[:40] in text
    if inspect.isfunction(obj):
        # the signature is shown, so a reader sees the arguments
        params = list(inspect.signature(obj).parameters)
        if params:
            assert params[0] in text


_SECTION = re.compile(r"^( *)(Args|Arguments|Returns|Raises|Yields|Attributes|Example|Examples|Note|Notes):\s*$")
_OTHER_DIALECTS = re.compile(r"^\s*(Parameters|Returns|Raises|Attributes)\s*\n\s*-{3,}\s*$|^\s*:(param|returns?|raises?)\b",
                             re.MULTILINE)


def _dialect_errors(source: str) -> list[str]:
    """Docstring sections of ``source`` that are not Google style with two-space indented entries."""
    errors = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc:
            continue
        name = getattr(node, "name", "<module>")
        if _OTHER_DIALECTS.search(doc):
            errors.append(f"{name}: numpy- or reST-style fields (use Args: / Returns: / Raises:)")
        lines = doc.split("\n")
        for i, line in enumerate(lines):
            match = _SECTION.match(line)
            if not match:
                continue
            body = next((x for x in lines[i + 1:] if x.strip()), None)
            if body is None:
                continue
            indent = len(body) - len(body.lstrip())
            if indent > len(match.group(1)) and indent != len(match.group(1)) + 2:
                errors.append(f"{name}: {match.group(2)}: entries indented by {indent - len(match.group(1))}, not 2")
    return errors


def test_docstrings_use_one_dialect():
    """Google style throughout: section headers followed by entries indented two spaces (issue 22)."""
    root = pathlib.Path(recon_jax.__file__).parent
    bad = [f"{p.relative_to(root)}: {e}" for p in sorted(root.rglob("*.py")) for e in _dialect_errors(p.read_text())]
    assert not bad, "docstrings in another dialect:\n" + "\n".join(bad)


def test_the_dialect_check_can_fail():
    four = 'def f(x):\n    """F.\n\n    Args:\n        x: an input.\n    """\n'
    numpy = 'def f(x):\n    """F.\n\n    Parameters\n    ----------\n    x : int\n    """\n'
    rest = 'def f(x):\n    """F.\n\n    :param x: an input.\n    """\n'
    two = 'def f(x):\n    """F.\n\n    Args:\n      x: an input,\n        continued.\n\n    Example:\n      >>> 1\n      1\n    """\n'
    assert "indented by 4" in _dialect_errors(four)[0]
    assert _dialect_errors(numpy) and _dialect_errors(rest)
    assert _dialect_errors(two) == []


def test_experiments_readme_lists_every_variant_of_each_experiment():
    """Each experiment's command line in experiments/README.md names all its config's VARIANTS (several listed only
    `:smoke`, or only `:default`, beside the variants their results were made with)."""
    import importlib
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "experiments", "README.md")) as f:
        text = f.read()
    commands = dict(re.findall(r"`python -m experiments\.(\w+) --config=experiments/configs/\w+\.py\[([^\]]*)\]", text))
    names = [n[:-3] for n in os.listdir(os.path.join(root, "experiments", "configs"))
             if n.endswith(".py") and n != "__init__.py"]
    checked = 0
    for name in names:
        variants = getattr(importlib.import_module(f"experiments.configs.{name}"), "VARIANTS", None)
        if variants is None or not os.path.exists(os.path.join(root, "experiments", f"{name}.py")):
            continue  # shared blocks, and the risk report's file (its command is recon-jax-report)
        assert name in commands, f"experiments/README.md has no command line for {name}"
        assert commands[name].split("|") == [f":{v}" for v in variants], name
        checked += 1
    assert checked >= 9
