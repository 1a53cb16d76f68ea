"""Test tooling: reduced-precision matrix products, emulated on any backend.

At JAX's default float32 matmul precision a GPU with tensor cores (A100, H100) rounds the operands of matrix
products and convolutions to TF32 (8 exponent bits, 10 mantissa bits, relative rounding error up to
``2^-11 ~ 4.9e-4``) and a TPU to bfloat16 (7 mantissa bits, up to ``2^-8 ~ 3.9e-3``); the products of the rounded
operands are then accumulated in float32. A CPU computes the same products in full float32, so a test that passes
on a CPU says nothing about a quantity that depends on the matmul precision. :func:`emulate_matmul_precision`
makes a CPU round like those backends, which lets the suite check on a CPU that a result does not depend on the
precision (the DP clipping bound, :mod:`recon_jax.training.dp`; the pinned bounds, :mod:`recon_jax.bounds.dct`),
and :func:`default_matmul_eps` gives tests that compare two differently rounded computations the rounding unit
their tolerance has to allow for.

Inside the context every ``dot_general`` and ``conv_general_dilated`` that JAX traces (``jnp.matmul``, ``@``,
``jnp.einsum``, ``jnp.dot``, ``lax.conv``, the transposes that ``grad`` derives from them, and their ``vmap``
batching) has each float32 operand whose precision is below ``Precision.HIGHEST`` rounded to the emulated format
(``lax.reduce_precision``, round to nearest even) before the product. A product that asks for ``HIGHEST``
(explicitly, or through ``jax.default_matmul_precision("highest")``, which JAX resolves when it traces the product)
is left exact, as on a GPU. ``HIGH`` counts as reduced (on a GPU it is TF32 too). Float64, integer and
low-precision operands are left alone (the backends round only float32).

With ``exact_matrix_vector=True`` a product in which one operand has no free dimension larger than 1 (a
matrix-vector or vector-vector product, such as one example's forward pass ``[1, d] x [d, h]``) is left exact too:
XLA on a GPU computes those as float32 reductions or GEMV calls, not on the tensor cores, so a batched computation
(rounded) and the same computation for one example (exact) differ there. The default rounds every product, which
is the stricter setting for a bound that must hold whatever is rounded.

Not emulated: the order in which a backend accumulates, and library routines that do not go through
``dot_general`` (``jnp.linalg`` decompositions).

The emulation intercepts ``dot_general_p.bind`` and ``conv_general_dilated_p.bind`` for the duration of the
context; it clears JAX's caches on entry and on exit so that no function traced outside it is reused inside it,
or the other way round. Contexts do not nest, and it is not thread-safe: use it in tests and audits, never around
production code. ``pytest --emulate-matmul-precision=tensorfloat32`` (the repository's ``conftest.py``) runs a
whole test selection under it.
"""

from __future__ import annotations

import contextlib
import traceback
from typing import Iterator

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

__all__ = ["FORMATS", "active", "default_matmul_eps", "emulate_matmul_precision", "rounds_at"]

# (exponent bits, mantissa bits) of the formats the backends round float32 operands to.
FORMATS = {"tensorfloat32": (8, 10), "bfloat16": (8, 7)}

_PRIMITIVES = (lax.dot_general_p, lax.conv_general_dilated_p)


def _round(x, *, exponent_bits, mantissa_bits):
    return lax.reduce_precision(x, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)


# The rounding of a product's operand, as a primitive of its own: ``reduce_precision`` forwards, but transposed as the
# identity (straight through). A gradient is then the result of its own rounded-operand products, as on the
# hardware, and is not rounded once more on its way back (reduce_precision's transpose would round the cotangent).
_operand_rounding_p = Primitive("emulated_operand_rounding")
_operand_rounding_p.def_impl(_round)
_operand_rounding_p.def_abstract_eval(lambda x, **_: x)
mlir.register_lowering(_operand_rounding_p, mlir.lower_fun(_round, multiple_results=False))
batching.defvectorized(_operand_rounding_p)
ad.deflinear2(_operand_rounding_p, lambda ct, x, **_: [ct])
_FULL_PRESETS = (lax.DotAlgorithmPreset.F32_F32_F32, lax.DotAlgorithmPreset.F64_F64_F64)
_active: str | None = None


def rounds_at(precision) -> tuple[bool, bool]:
    """Whether a backend that rounds float32 products rounds the (lhs, rhs) operands of a product traced with the
    (canonical) ``precision`` parameter of ``dot_general`` / ``conv_general_dilated``.

    >>> rounds_at(None), rounds_at((lax.Precision.HIGHEST, lax.Precision.HIGHEST))
    ((True, True), (False, False))
    >>> rounds_at((lax.Precision.HIGH, lax.Precision.HIGHEST))
    (True, False)
    """
    if precision is None:
        return True, True
    if isinstance(precision, lax.DotAlgorithmPreset):
        full = precision in _FULL_PRESETS
        return not full, not full
    if isinstance(precision, lax.DotAlgorithm):
        return (jnp.dtype(precision.lhs_precision_type) not in (jnp.float32, jnp.float64),
                jnp.dtype(precision.rhs_precision_type) not in (jnp.float32, jnp.float64))
    if isinstance(precision, lax.Precision):
        precision = (precision, precision)
    return tuple(lax.Precision(p) != lax.Precision.HIGHEST for p in precision)


def active() -> str | None:
    """The format being emulated (``"tensorfloat32"`` or ``"bfloat16"``), or ``None`` outside the context."""
    return _active


def default_matmul_eps() -> float:
    """Relative rounding unit of a float32 product's operands at JAX's default precision, here and now.

    ``2^-24`` (float32) on a CPU or wherever ``jax_default_matmul_precision`` is ``"highest"``/``"float32"``;
    ``2^-11`` (TF32) on a GPU, ``2^-8`` (bfloat16) on a TPU or another accelerator; the emulated format's inside
    :func:`emulate_matmul_precision`. A GPU without TF32 (V100) computes in float32, so this errs on the safe side.
    Tests that compare two computations whose products round differently scale their tolerance by it.

    >>> default_matmul_eps() in (2.0**-24, 2.0**-11, 2.0**-8)  # 2^-24 on a CPU
    True
    """
    if _active is not None:
        return 2.0 ** -(FORMATS[_active][1] + 1)
    if jax.config.jax_default_matmul_precision in ("highest", "float32"):
        return 2.0**-24
    backend = jax.default_backend()
    if backend == "cpu":
        return 2.0**-24
    return 2.0**-11 if backend in ("gpu", "cuda", "rocm") else 2.0**-8


def _caller() -> str:
    """The innermost stack frame in recon_jax (else outside JAX and the standard library): ``file:line (function)``."""
    frames = [f for f in traceback.extract_stack()[:-3] if f.filename not in (__file__, contextlib.__file__)]
    library = [f for f in frames if "/recon_jax/" in f.filename]
    outside = [f for f in frames if "/jax/" not in f.filename and "/jaxlib/" not in f.filename]
    for frame in reversed(library or outside or frames):
        return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "?"


def _is_matrix_vector(lhs, rhs, params) -> bool:
    """Whether one operand of a ``dot_general`` has no free (non-contracting, non-batch) dimension larger than 1."""
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    free = lambda x, used: [d for i, d in enumerate(jnp.shape(x)) if i not in used and d > 1]
    return not free(lhs, set(lc) | set(lb)) or not free(rhs, set(rc) | set(rb))


@contextlib.contextmanager
def emulate_matmul_precision(fmt: str = "tensorfloat32", *, exact_matrix_vector: bool = False,
                             record: list | None = None) -> Iterator[None]:
    """Within the context, float32 matrix products below ``Precision.HIGHEST`` round their operands like a GPU
    (``"tensorfloat32"``) or a TPU (``"bfloat16"``) does at default precision (module docstring).

    Args:
      fmt: ``"tensorfloat32"`` (8 exponent, 10 mantissa bits) or ``"bfloat16"`` (8, 7).
      exact_matrix_vector: leave products with a vector operand exact, as XLA on a GPU computes them.
      record: optional list; each product traced inside the context whose operands get rounded appends
        ``(primitive name, operand shapes, innermost caller in recon_jax)`` to it (an audit of the products
        whose results depend on the matmul precision).

    Raises:
      ValueError: on an unknown format.
      RuntimeError: when entered while another emulation context is active.

    >>> x = jnp.float32(1 + 2.0**-12)  # not representable with 10 mantissa bits: rounds to 1
    >>> a, b = jnp.stack([x, x]), jnp.ones((2, 2))
    >>> with emulate_matmul_precision("tensorfloat32"):
    ...     rounded = (a @ b).tolist()
    ...     exact = jnp.matmul(a, b, precision=lax.Precision.HIGHEST).tolist()
    ...     eps = default_matmul_eps()
    >>> rounded, exact == (a @ b).tolist(), eps == 2.0**-11
    ([2.0, 2.0], True, True)
    """
    global _active
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FORMATS)}, got {fmt!r}")
    if _active:
        raise RuntimeError("emulate_matmul_precision contexts do not nest")
    exponent_bits, mantissa_bits = FORMATS[fmt]

    def rnd(x):
        return _operand_rounding_p.bind(x, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)

    def make_bind(prim):
        orig = type(prim).bind

        def bind(lhs, rhs, **params):
            round_l, round_r = rounds_at(params.get("precision"))
            if exact_matrix_vector and prim is lax.dot_general_p and _is_matrix_vector(lhs, rhs, params):
                round_l = round_r = False
            round_l &= getattr(lhs, "dtype", None) == jnp.float32  # the backends round float32 only
            round_r &= getattr(rhs, "dtype", None) == jnp.float32
            if record is not None and (round_l or round_r):
                record.append((prim.name, (jnp.shape(lhs), jnp.shape(rhs)), _caller()))
            return orig(prim, rnd(lhs) if round_l else lhs, rnd(rhs) if round_r else rhs, **params)

        return bind

    _active = fmt
    jax.clear_caches()
    try:
        for prim in _PRIMITIVES:
            prim.bind = make_bind(prim)
        yield
    finally:
        for prim in _PRIMITIVES:
            prim.__dict__.pop("bind", None)
        jax.clear_caches()
        _active = None
