"""Tests of recon_jax.io: atomic writes and stable_hash."""

import os

import jax
import numpy as np

from recon_jax.io import atomic_write_bytes, stable_hash


def test_atomic_write_accepts_a_name_as_long_as_open_does(tmp_path):
    name = "r" * 250  # legal (NAME_MAX is 255); the temporary name once appended it to ".tmp-XXXXXXXX"
    with open(tmp_path / ("p" * 250), "wb"):
        pass
    atomic_write_bytes(tmp_path / name, b"data")
    assert (tmp_path / name).read_bytes() == b"data"
    assert sorted(os.listdir(tmp_path)) == sorted([name, "p" * 250])  # no temporary left behind


def test_stable_hash_hashes_every_element_of_a_key_array():
    a = jax.random.split(jax.random.key(0), 2000)
    b = a.at[1000].set(jax.random.key(5))  # str() of a 2000-key array shows only its ends
    assert bool((jax.random.key_data(a) != jax.random.key_data(b)).any())
    assert stable_hash({"keys": a}) != stable_hash({"keys": b})
    assert stable_hash({"keys": a}) == stable_hash({"keys": jax.random.split(jax.random.key(0), 2000)})
    k = jax.random.key(3)
    assert stable_hash(k) == stable_hash(k) == stable_hash(jax.random.key(3)) != stable_hash(jax.random.key(4))


def test_stable_hash_tells_arrays_apart_by_dtype_and_shape():
    """Arrays of equal values but another dtype or shape are other inputs (before: hashed by ``tolist()`` alone, so
    float32 and float64 halves, or empty arrays of any shape, shared a cache key)."""
    assert stable_hash({"x": np.float32([0.5, 1.0])}) != stable_hash({"x": np.float64([0.5, 1.0])})
    assert stable_hash({"x": np.zeros((0, 3))}) != stable_hash({"x": np.zeros((0, 5))})
    assert stable_hash({"x": np.float32([0.5])}) == stable_hash({"x": jax.numpy.asarray([0.5], jax.numpy.float32)})


def test_stable_hash_tells_int_keys_from_str_keys_and_sorts_mixed_keys():
    # JSON turns every key into a string: {1: x} and {"1": x} were one input, and mixed int/str keys failed to sort.
    assert stable_hash({"a": {1: 2.0}}) != stable_hash({"a": {"1": 2.0}})
    assert stable_hash({True: 0}) != stable_hash({"true": 0})
    assert stable_hash({1: "x", "b": [None]}) == stable_hash({"b": [None], 1: "x"})
    assert stable_hash([{2: 0, 1: 0}]) == stable_hash(({1: 0, 2: 0},))  # a list and a tuple are one JSON array
    assert stable_hash({"a": 1, "b": [2, 3]}) == stable_hash({"b": (2, 3), "a": 1})


def test_code_record_ignores_prose_but_not_code(tmp_path):
    """An edit of a comment or a docstring (the README walkthrough's rerun was refused after a docstring commit)
    leaves the code record as it was; an edit of what runs, a new file or a syntax error changes it."""
    from recon_jax.io import code_record

    base = ('"""Module doc."""\n\n\ndef f(x):\n    """Doubles x."""\n    return 2 * x  # twice\n\n\n'
            'class A:\n    """A doc."""\n\n    y = "not a docstring"\n')
    variants = {
        "same": base,
        "prose": base.replace("Module doc.", "Other words.").replace("# twice", "# x2").replace("A doc.", "B."),
        "layout": base.replace("return 2 * x", "return (\n        2*x\n    )"),
        "code": base.replace("2 * x", "3 * x"),
        "string": base.replace("not a docstring", "another value"),
        "broken": base + "def (\n",
    }
    records = {}
    for name, text in variants.items():
        root = tmp_path / name / "pkg"
        root.mkdir(parents=True)
        (root / "m.py").write_text(text)
        records[name] = code_record([str(root)])["sources"]
    assert records["prose"] == records["layout"] == records["same"]
    assert len({records[n] for n in ("same", "code", "string", "broken")}) == 4
    (tmp_path / "same" / "pkg" / "n.py").write_text("")
    extra = tmp_path / "more" / "pkg"
    extra.mkdir(parents=True)
    (extra / "m.py").write_text(base)
    (extra / "n.py").write_text("")
    assert code_record([str(extra)])["sources"] != records["same"]


def test_callable_identity_reads_the_module_globals_the_code_names():
    """A loss reading a module constant kept its identity when the constant changed, so a shadow store trained with
    SCALE = 1 was reused for SCALE = 0 (across processes, where the edit is a code edit)."""
    import types

    from recon_jax.io import callable_identity

    mod = types.ModuleType("user_losses")
    exec("import jax.numpy as jnp\nSCALE = 1.0\n\ndef loss(logits, labels):\n"
         "    return SCALE * jnp.sum(logits, -1)\n\ndef outer(x):\n    return (lambda y: SCALE * y)(x)\n", mod.__dict__)
    before = callable_identity(mod.loss), callable_identity(mod.outer)
    mod.SCALE = 0.0
    after = callable_identity(mod.loss), callable_identity(mod.outer)  # outer reads SCALE in a nested lambda
    assert before[0] != after[0] and before[1] != after[1]
    mod.SCALE = 1.0
    assert (callable_identity(mod.loss), callable_identity(mod.outer)) == before  # a value, not an address
