"""Every public name of recon_jax has a docstring that ``help()`` renders (issue: docs for every public function)."""

import importlib
import inspect
import pkgutil
import pydoc

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
