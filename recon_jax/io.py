"""Atomic, crash-safe file writes shared by every long job (shadow store, DR shadow embeddings, reports), and the
identities that key stores and caches: of values (:func:`stable_hash`, :func:`array_digest`), of functions
(:func:`callable_identity`) and of the code that fills a store (:func:`code_record`, :func:`library_code`).

A file is written to a temporary name in the same directory, flushed and fsync'ed, then renamed over the final
name, so a reader sees either the old complete file or the new complete file, never a partial one. Files get the
mode a plain ``open(path, "w")`` would give them (``0o666`` less the process umask, usually ``0o644``), not the
``0o600`` of the temporary file.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import os
import importlib.metadata
import sys
import tempfile
from typing import Any, Sequence

import jax
import numpy as np

__all__ = [
    "ABOVE_STORES",
    "NUMERIC_PACKAGES",
    "allow_resume_across_code",
    "callable_identity",
    "code_difference",
    "config_difference",
    "code_record",
    "library_code",
    "numeric_versions",
    "resume_across_code_allowed",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_save_npz",
    "seed_from_key",
    "source_code_digest",
    "stable_hash",
    "strict_json",
]


def _process_umask() -> int:
    """The process umask (read once, at import: ``os.umask`` can only be read by setting it, which is not
    thread-safe, so it is never touched again)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_process_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (temp file + fsync + rename + directory fsync), readable as a file
    made by ``open`` would be (``0o666`` less the umask at import).

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp(); atomic_write_bytes(os.path.join(d, "atomic"), b"x")
    >>> open(os.path.join(d, "plain"), "wb").close()
    >>> os.stat(os.path.join(d, "atomic")).st_mode == os.stat(os.path.join(d, "plain")).st_mode
    True
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # a short name (".tmp-" + 8 random characters), not the target's name: the target may be as long as the file
    # system allows (NAME_MAX, usually 255). The ".tmp-" prefix is what ShadowStore.clean_leftovers deletes.
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp creates 0o600: others could not read reports or stores
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Writes UTF-8 ``text`` to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Writes ``obj`` as indented JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def atomic_save_npz(path: str | os.PathLike, **arrays: Any) -> None:
    """Saves NumPy arrays to an ``.npz`` file atomically (uncompressed, so it can be read quickly)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def stable_hash(obj: Any) -> str:
    """SHA-256 hex digest of ``obj`` as canonical JSON (sorted keys, no whitespace): the key of caches and stores.

    Arrays are hashed by dtype, shape and value (two arrays of equal values but another dtype or shape, e.g. empty
    ones, are different inputs) and NumPy scalars by value; typed JAX PRNG key arrays (``jax.random.key``) by their
    implementation, shape and every element of ``jax.random.key_data`` (``str`` summarises arrays of more than 1000
    elements with ``...``); anything else JSON cannot encode is hashed by ``str``. A dict whose keys are not all
    strings is hashed as its (key, value) pairs, sorted by the keys' encoding, so that ``{1: x}`` and ``{"1": x}``
    (one JSON object) are different inputs and mixed key types can be sorted.

    >>> stable_hash({"b": 1, "a": [1.5, "x"]}) == stable_hash({"a": [1.5, "x"], "b": 1})
    True
    >>> stable_hash({"a": 1}) == stable_hash({"a": 2})
    False
    >>> import numpy as np
    >>> stable_hash(np.zeros((0, 2))) == stable_hash(np.zeros((0, 3))), stable_hash(np.ones(2)) == stable_hash([1., 1.])
    (False, False)
    >>> stable_hash({1: "x"}) == stable_hash({"1": "x"}), stable_hash({1: "x", None: 0}) == stable_hash({None: 0, 1: "x"})
    (False, True)
    """
    def default(o: Any) -> Any:
        if isinstance(o, jax.Array) and jax.dtypes.issubdtype(o.dtype, jax.dtypes.prng_key):
            return {"prng_key_impl": str(jax.random.key_impl(o)), "shape": list(o.shape),
                    "key_data": np.asarray(jax.random.key_data(o)).tolist()}
        if not isinstance(o, np.generic) and (isinstance(o, np.ndarray) or hasattr(o, "__array__")):
            a = np.asarray(o)
            return {"array_dtype": a.dtype.str, "shape": list(a.shape), "values": a.tolist()}
        try:
            return _json_default(o)
        except TypeError:
            return str(o)

    def encode(o: Any) -> str:
        return json.dumps(canonical(o), sort_keys=True, separators=(",", ":"), default=default)

    def canonical(o: Any) -> Any:
        if isinstance(o, dict):
            if all(isinstance(k, str) for k in o):
                return {k: canonical(v) for k, v in o.items()}
            pairs = sorted(([encode(k), canonical(v)] for k, v in o.items()), key=lambda kv: kv[0])
            return {"dict_with_non_str_keys": pairs}
        if isinstance(o, (list, tuple)):
            return [canonical(v) for v in o]
        return o

    return hashlib.sha256(encode(obj).encode("utf-8")).hexdigest()


def array_digest(a, block_rows: int = 4096) -> str:
    """SHA-256 of an array's dtype, shape and bytes (C order): the identity of data in cache and store keys.

    Reads ``block_rows`` rows at a time, so a memory-mapped array is never copied whole.

    >>> import numpy as np
    >>> array_digest(np.zeros(2)) == array_digest(np.zeros(2)) != array_digest(np.zeros(2, np.float32))
    True
    >>> array_digest(np.arange(10).reshape(5, 2), block_rows=2) == array_digest(np.arange(10).reshape(5, 2))
    True
    """
    a = a if isinstance(a, np.ndarray) else np.asarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    if a.ndim == 0:
        h.update(a.tobytes())
    for start in range(0, a.shape[0] if a.ndim else 0, block_rows):
        h.update(np.ascontiguousarray(a[start:start + block_rows]).tobytes())
    return h.hexdigest()


def callable_identity(fn: Any) -> str:
    """A function's identity for cache and store keys: ``module.qualname#digest``, the digest covering what decides
    what it computes beyond its name: its code (bytecode, constants, names), defaults and the values its closure
    captured (arrays by value, functions recursively), and a ``functools.partial``'s arguments.

    The values of the module globals its code reads count too (modules and classes by name only).
    Two closures from one factory (``scaled(1.0)``, ``scaled(0.0)``) or two lambdas share a qualname but not an
    identity. A captured object without a stable description (its ``repr`` shows a memory address) makes the
    identity differ between processes: such a store is recomputed, never reused wrongly.

    >>> def scaled(c):
    ...     return lambda x: c * x
    >>> callable_identity(scaled(1.0)) == callable_identity(scaled(1.0)) != callable_identity(scaled(0.0))
    True
    >>> callable_identity(len).split("#")[0]
    'builtins.len'
    """
    return _identity(fn, depth=0)


def _identity(fn: Any, depth: int) -> str:
    import functools
    import inspect

    if isinstance(fn, functools.partial):
        return stable_hash({"partial": _identity(fn.func, depth + 1), "args": [_value(v, depth) for v in fn.args],
                            "keywords": {k: _value(v, depth) for k, v in sorted(fn.keywords.items())}})
    inner = inspect.unwrap(fn) if callable(fn) else fn  # jax.jit and functools.wraps wrappers
    name = f"{getattr(inner, '__module__', '')}.{getattr(inner, '__qualname__', type(inner).__qualname__)}"
    code = getattr(inner, "__code__", None)
    if code is None:  # a builtin, a class or a callable object: its type and its repr
        return f"{name}#{stable_hash([type(inner).__qualname__, repr(inner)])[:16]}"
    cells = [c.cell_contents if _cell_filled(c) else None for c in (inner.__closure__ or ())]
    parts = [_code_parts(code), [_value(v, depth) for v in inner.__defaults__ or ()],
             {k: _value(v, depth) for k, v in sorted((inner.__kwdefaults__ or {}).items())},
             [_value(v, depth) for v in cells], _global_values(inner, code, depth)]
    return f"{name}#{stable_hash(parts)[:16]}"


def _global_values(fn, code, depth: int) -> dict:
    """The values of the module globals a function's code names (its own and its nested functions'), modules and
    classes left out: a ``SCALE = 0.0`` edited in the module changes the identity as a captured value does."""
    import types

    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_code"))
    scope = getattr(fn, "__globals__", {})
    return {n: _value(scope[n], depth) for n in sorted(names)
            if n in scope and not isinstance(scope[n], (types.ModuleType, type))}


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a name assigned after the closure was made)
        return False
    return True


def _code_parts(code) -> list:
    consts = [_code_parts(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, list(code.co_names)]


def _value(v: Any, depth: int) -> Any:
    """A captured value's description: JSON scalars as they are, arrays by digest, containers elementwise,
    functions by :func:`callable_identity` (to depth 8: deeper, or a cycle, by name only), anything else by
    ``repr``."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (np.ndarray, jax.Array, np.generic)):
        return array_digest(np.asarray(v))
    if isinstance(v, (list, tuple)):
        return [_value(x, depth) for x in v]
    if isinstance(v, dict):
        return {str(k): _value(x, depth) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if callable(v) and not isinstance(v, type):
        return _identity(v, depth + 1) if depth < 8 else f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}"
    return repr(v)


def strict_json(obj: Any, path: str = "") -> Any:
    """Returns ``obj`` with every float made standard-JSON safe: +-inf become the strings ``"inf"``/``"-inf"``.

    Raises:
      ValueError: if any value is NaN, naming its key path (a NaN is a failed computation, never a result).

    >>> strict_json({"a": [1.0, float("inf")]})
    {'a': [1.0, 'inf']}
    """
    if isinstance(obj, dict):
        return {k: strict_json(v, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__array__") and not isinstance(obj, (str, bytes))):
        arr = np.asarray(obj)
        return strict_json(arr.tolist() if arr.ndim else arr.item(), path)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        if math.isnan(obj):
            raise ValueError(f"NaN at {path or 'top level'}: a NaN is a failed computation and is not written as a result")
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "__array__"):
        return np.asarray(obj).tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# The packages whose numerics stored results rest on: a jax or flax upgrade can move trained weights as an edit can.
NUMERIC_PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "scipy", "dm-haiku", "scikit-learn", "umap-learn")
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_RECORDS: dict = {}  # (roots, skip) -> code_record: the files are read once per process
_ACROSS_CODE = [False]


def numeric_versions() -> dict[str, str | None]:
    """Python's ``major.minor`` and the installed version of each of :data:`NUMERIC_PACKAGES` (None: absent).

    >>> numeric_versions()["jax"] == jax.__version__
    True
    """
    def version(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {"python": f"{sys.version_info.major}.{sys.version_info.minor}",
            **{p: version(p) for p in NUMERIC_PACKAGES}}


def source_code_digest(source: bytes) -> bytes:
    r"""SHA-256 of a Python file's code: its syntax tree (``ast.dump``: no comments, layout or line numbers) with
    every module, class and function docstring removed; of its bytes where it does not parse.

    >>> a = source_code_digest(b"def f(x):\n    'Doubles.'\n    return 2 * x  # twice\n")
    >>> a == source_code_digest(b"def f(x):\n    'Twice x.'\n\n    return 2*x\n")
    True
    >>> a == source_code_digest(b"def f(x):\n    'Doubles.'\n    return 3 * x\n")
    False
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return hashlib.sha256(b"bytes\0" + source).digest()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(b"ast\0" + ast.dump(tree).encode()).digest()


def code_record(roots: Sequence[str], skip: Sequence[str] = ()) -> dict:
    """The identity of the Python code under ``roots`` and of the packages it computes with.

    ``sources`` is a SHA-256 of every ``.py`` file under the roots as it is on disk: its path relative to its root's
    parent (``recon_jax/io.py``) and its code (:func:`source_code_digest`: the syntax tree without docstrings, so
    that an edit of prose alone, a comment or a docstring, leaves stores and resume points usable); ``__pycache__``
    and the folders ``skip`` names (the same relative paths: ``recon_jax/report``) are left out. ``fingerprint``
    hashes ``sources`` with :func:`numeric_versions`. It is a hash of files, not of a git commit: the same in every
    process that reads the same files (a copy without ``.git`` too), and it changes with an uncommitted edit of the
    code. Read once per process.

    Args:
      roots: folders to hash (a missing one hashes as empty).
      skip: folders under them to leave out, as paths relative to a root's parent.

    Returns:
      ``{"fingerprint": 16 hex, "sources": 16 hex, "versions": numeric_versions(), "scope": {"roots", "skip"}}``.

    >>> import os
    >>> record = code_record([os.path.dirname(__file__)], skip=["recon_jax/report"])
    >>> len(record["fingerprint"]), record["scope"]
    (16, {'roots': ['recon_jax'], 'skip': ['recon_jax/report']})
    """
    cache_key = (tuple(os.path.abspath(r) for r in roots), tuple(sorted(skip)))
    if cache_key not in _RECORDS:
        h = hashlib.sha256()
        for root in cache_key[0]:
            parent = os.path.dirname(root)
            for dirpath, dirnames, names in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__"
                                     and os.path.relpath(os.path.join(dirpath, d), parent) not in cache_key[1])
                for name in sorted(n for n in names if n.endswith(".py")):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, parent).encode() + b"\0")
                    with open(path, "rb") as f:
                        h.update(source_code_digest(f.read()) + b"\0")
        sources, versions = h.hexdigest()[:16], numeric_versions()
        _RECORDS[cache_key] = {"fingerprint": stable_hash([sources, versions])[:16], "sources": sources,
                               "versions": versions,
                               "scope": {"roots": [os.path.basename(r) for r in cache_key[0]],
                                         "skip": list(cache_key[1])}}
    return json.loads(json.dumps(_RECORDS[cache_key]))  # a copy: callers store and extend it


# The layers of recon_jax above its stores (tests/test_layers.py): nothing that computes a store's content imports them.
ABOVE_STORES = ("evidence", "report")


def library_code(without: Sequence[str] = ABOVE_STORES) -> dict:
    """:func:`code_record` of the installed recon_jax package, without its subpackages ``without``: what the
    library's stores record and compare (the shadow store, the reconstructor checkpoints).

    By default everything but :data:`ABOVE_STORES` (the run harness and the risk report): recon_jax is layered
    (``tests/test_layers.py`` checks that no module imports from a layer above its own), so no module of those
    layers runs while a store is filled; what they pass in (configurations, models, data) is in the store's key.
    A store that only lower layers fill leaves out more (the shadow-model engine's stores leave out ``attacks``).
    The experiments' sources are not part of it (:func:`recon_jax.evidence.code_fingerprint` adds them).

    >>> library_code()["scope"]["skip"]
    ['recon_jax/evidence', 'recon_jax/report']
    """
    name = os.path.basename(_PACKAGE_DIR)
    return code_record([_PACKAGE_DIR], skip=[f"{name}/{sub}" for sub in without])


def code_difference(written: Any, current: dict) -> str | None:
    """What differs between the code a store recorded (``written``, a :func:`code_record`) and ``current``, in
    words; None when the fingerprints agree.

    >>> now = library_code()
    >>> code_difference(now, now) is None
    True
    >>> code_difference(dict(now, fingerprint="0" * 16, versions=dict(now["versions"], jax="0.0.1")), now)
    ... # doctest: +ELLIPSIS
    'jax 0.0.1 then, ... now'
    >>> code_difference(None, now)
    'it records no code fingerprint (written by a recon_jax from before stores recorded their code)'
    """
    if not isinstance(written, dict) or not written.get("fingerprint"):
        return "it records no code fingerprint (written by a recon_jax from before stores recorded their code)"
    if written["fingerprint"] == current["fingerprint"]:
        return None
    parts = []
    if written.get("scope") != current.get("scope"):
        parts.append(f"its fingerprint covers other files ({written.get('scope')} then, {current.get('scope')} now)")
    elif written.get("sources") != current.get("sources"):
        scope = current.get("scope") or {}
        files = " and ".join(f"{r}/" for r in scope.get("roots", []))
        left_out = f" without {', '.join(scope['skip'])}" if scope.get("skip") else ""
        parts.append(f"the sources differ (the .py files of {files}{left_out}: {written.get('sources')} then, "
                     f"{current.get('sources')} now)")
    old, new = written.get("versions") or {}, current.get("versions") or {}
    parts += [f"{name} {old.get(name)} then, {new.get(name)} now" for name in sorted(set(old) | set(new))
              if old.get(name) != new.get(name)]
    return "; ".join(parts) or f"code fingerprint {written['fingerprint']} then, {current['fingerprint']} now"


def config_difference(stored: Any, asked: Any) -> str:
    """The fields (dotted paths, at most 4 named) where two JSON configurations differ, for a store's refusal.

    >>> config_difference({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}})
    'b.c'
    """
    out: list[str] = []

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        elif a != b:
            out.append(path or "the whole configuration")

    walk(stored, asked, "")
    more = f" and {len(out) - 4} more" if len(out) > 4 else ""
    return ", ".join(out[:4]) + more if out else "no field (the hash alone)"


def allow_resume_across_code(allow: bool = True) -> None:
    """Lets the library's stores (and the run harness's keyed directories) resume content written by other code
    (``--allow_resume_across_code``); each then records the code of every resume. Off by default: resuming
    across code mixes results of two versions of the code without saying so."""
    _ACROSS_CODE[0] = bool(allow)


def resume_across_code_allowed() -> bool:
    """Whether :func:`allow_resume_across_code` is in effect."""
    return _ACROSS_CODE[0]


def _seed(key: jax.Array) -> jax.Array:
    return jax.random.randint(key, (), 0, 2**31 - 1)


def seed_from_key(key: jax.Array) -> int | np.ndarray:
    """Non-negative 31-bit integer seeds drawn from typed JAX keys, for host libraries (NumPy, scikit-learn, umap).

    The library's one key-to-seed conversion: a uniform draw from the key, so distinct keys give independent
    seeds (it is used by the data splits and the dimensionality-reduction attack). A scalar key gives an ``int``;
    an array of keys gives an ``int64`` array of the same shape, equal to the per-key seeds. Raw ``uint32`` key
    data is accepted too (wrapped with the default implementation).

    Example:
      >>> import jax
      >>> keys = jax.random.split(jax.random.key(0), 3)
      >>> seed_from_key(keys).tolist() == [seed_from_key(k) for k in keys]
      True
      >>> 0 <= seed_from_key(jax.random.key(1)) < 2**31
      True
    """
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    if key.ndim == 0:
        return int(_seed(key))
    return np.asarray(jax.vmap(_seed)(key.reshape(-1)), dtype=np.int64).reshape(key.shape)
