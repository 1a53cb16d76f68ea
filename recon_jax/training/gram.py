"""Full-batch training of many models that share a fixed set, through the fixed set's Gram matrix.

Gradient descent, with or without (heavy-ball or Nesterov) momentum, only ever adds to a dense layer's kernel
``W`` [d, h] combinations of its input rows: the kernel gradient is ``X^T Delta``, where ``X`` [N, d] holds the
layer's inputs and ``Delta = dL / dP`` [N, h] the gradient of the loss with respect to its outputs ``P = X W + b``.
So after t steps of the default optimizer (SGD with momentum, linear in the gradients)

    W_t = W_0 + X^T A_t,

where ``A_t`` [N, h] follows the optimizer's own recursion with ``Delta`` in place of the kernel gradient. When
``X`` is the raw training input (the model's first dense layer reads the flattened images), the layer's outputs are

    P_t = X W_0 + (X X^T) A_t + b_t,

so training never needs ``W_t``: with the fixed set's Gram matrix ``K = X_- X_-^T`` [n, n], computed once and
shared by every shadow model, a step costs one ``n x n x h`` product where the forward and backward passes cost
two ``n x d x h`` products. For Balle et al.'s MNIST MLP (n = 1,000, d = 784) that is 0.64 of the step's matmul
work. The target row enters through ``X_- x_t`` and ``x_t . x_t`` (per model, once), and the final kernel
``W_0 + X^T A_T`` is formed once at the end. The result equals :func:`~recon_jax.training.train` up to float
rounding (both compute the same pre-activations, summed in a different order).

It applies (:func:`gram_supported`) to non-private full-batch training with the default optimizer, when the
model's first dense call (through its ``tap``) receives the flattened input itself and its kernel is used once;
other layers may be anything. :func:`recon_jax.shadow.generate_shadow_models` uses it automatically on CPU devices
where it saves work (``first_layer="auto"``; :func:`choose_first_layer`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.models.adapters import ModelFns
from recon_jax.models.taps import leaf_paths, tap_calls
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.train import TrainResult, starting_params

__all__ = ["FIRST_LAYER_MODES", "choose_first_layer", "first_dense_layer", "gram_algorithm", "gram_supported",
           "gram_saves_work", "fixed_set_gram", "train_gram"]

#: How the shadow engine trains a first dense layer: through the fixed set's Gram matrix (``"gram"``), model by
#: model (``"direct"``), or the Gram path where it saves work (``"auto"``; :func:`choose_first_layer`).
FIRST_LAYER_MODES = ("auto", "gram", "direct")


def first_dense_layer(model_fns: ModelFns, params, x) -> tuple[tuple, int, int] | None:
    """The first dense call's ``(kernel_path, d, h)`` if it reads the flattened input ``x`` and its kernel is used
    once; else ``None``. Works on abstract parameters (inside ``jit``/``vmap``) too.

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> mlp = from_flax(balle_mnist_mlp())
    >>> first_dense_layer(mlp, jax.eval_shape(mlp.init, jax.random.key(0), jnp.zeros((1, 784))), jnp.zeros((4, 784)))
    (('Dense_0', 'kernel'), 784, 10)
    """
    leaves = leaf_paths(params)
    if not leaves:
        return None
    calls = tap_calls(model_fns.tap, params, x[:2])
    if not calls:  # no tap, a model the tap cannot run, or no dense call
        return None
    kernel_path = calls[0][0]
    if sum(c[0] == kernel_path for c in calls) != 1 or kernel_path not in leaves:
        return None
    d = int(np.prod(x.shape[1:]))
    in_shape, out_shape = calls[0][2], calls[0][3]
    if tuple(in_shape) != (2, d) or len(out_shape) != 2 or tuple(leaves[kernel_path].shape) != (d, out_shape[1]):
        return None
    # Does the layer see the input itself? Checked on concrete stand-ins (parameter values do not matter for it).
    concrete = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), params)
    probe = np.random.default_rng(0).standard_normal((2,) + tuple(x.shape[1:])).astype(x.dtype)
    with jax.ensure_compile_time_eval():
        _, recs = model_fns.tap(concrete, probe, None)
        same = bool(np.array_equal(np.asarray(recs[0].inputs), probe.reshape(2, d)))
    if not same:
        return None  # the layer sees a transformed input (normalisation, convolution, ...)
    return kernel_path, d, int(out_shape[1])


def gram_algorithm(algorithm: Algorithm) -> bool:
    """Whether :func:`train_gram` can run ``algorithm``: full batch, no clipping or noise, the default optimizer
    (the updates are then linear in the gradients)."""
    return algorithm.batch_size is None and not algorithm.private and algorithm.optimizer is None


def gram_supported(model_fns: ModelFns, algorithm: Algorithm, params, x) -> bool:
    """Whether :func:`train_gram` applies: full batch, no clipping, the default optimizer (SGD with momentum) and a
    first dense layer that reads the flattened input.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp, balle_cifar_cnn
    >>> from recon_jax.training import full_batch_gd, minibatch_sgd
    >>> mlp = from_flax(balle_mnist_mlp())
    >>> p = mlp.init(jax.random.key(0), jnp.zeros((1, 784)))
    >>> gram_supported(mlp, full_batch_gd(), p, jnp.zeros((4, 784)))
    True
    >>> gram_supported(mlp, minibatch_sgd(2), p, jnp.zeros((4, 784)))
    False
    """
    return gram_algorithm(algorithm) and first_dense_layer(model_fns, params, x) is not None


def gram_saves_work(n: int, d: int, h: int, steps: int, models: int) -> bool:
    """Whether training ``models`` models for ``steps`` steps through the Gram matrix does less matmul work than
    directly: ``n^2 d`` once for the Gram matrix plus ``n^2 h`` per step and model, against ``2 n d h`` per step
    and model; with a margin for the extra elementwise work (``n <= 1.5 d``).

    >>> gram_saves_work(1000, 784, 10, 100, 1024), gram_saves_work(1000, 784, 10, 100, 1)
    (True, False)
    """
    return n <= 1.5 * d and models * steps * (2 * n * d * h - n * n * h) > n * n * d


def choose_first_layer(mode: str, model_fns: ModelFns, algorithm: Algorithm, params, fixed_x,
                       models: int, platform: str | None = None) -> tuple | None:
    """How many-model training treats the first layer: the first dense kernel's path when it goes through the fixed
    set's Gram matrix (:func:`train_gram`), ``None`` for direct training (:func:`~recon_jax.training.train`).

    Args:
      mode: ``"direct"`` (never the Gram path), ``"gram"`` (always; ``ValueError`` where it does not apply) or
        ``"auto"`` (on a CPU, where it applies, :func:`gram_algorithm` and :func:`first_dense_layer`, and saves
        work, :func:`gram_saves_work`; elsewhere never).
      model_fns, algorithm, params: the model, the training algorithm, (abstract) initial parameters.
      fixed_x: the fixed set's inputs ``[n, ...]``.
      models: how many models share the fixed set.
      platform: the devices' platform (``jax.Device.platform``; None: ``jax.default_backend()``, where the
        training runs unless told otherwise). ``"auto"`` takes the Gram path on ``"cpu"``
        only: there its saved matmul work is saved time, while on an H100 the direct path trained the Balle MLP's
        shadow models 2.3x faster (12,200 against 5,240 models/s, ``benchmarks/shadow.py``); the direct
        path is also the one to trust on an unmeasured backend.

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd
    >>> mlp = from_flax(balle_mnist_mlp())
    >>> p = jax.eval_shape(mlp.init, jax.random.key(0), jnp.zeros((1, 784)))
    >>> choose_first_layer("auto", mlp, full_batch_gd(), p, jnp.zeros((100, 784)), models=64)
    ('Dense_0', 'kernel')
    >>> choose_first_layer("direct", mlp, full_batch_gd(), p, jnp.zeros((100, 784)), models=64) is None
    True
    >>> choose_first_layer("auto", mlp, full_batch_gd(), p, jnp.zeros((100, 784)), models=64, platform="gpu") is None
    True
    """
    if mode not in FIRST_LAYER_MODES:
        raise ValueError(f"first_layer must be one of {FIRST_LAYER_MODES}; got {mode!r}")
    if mode == "direct":
        return None
    found = first_dense_layer(model_fns, params, fixed_x) if gram_algorithm(algorithm) else None
    if found is None:
        if mode == "gram":
            raise ValueError("first_layer='gram' needs full-batch, non-private training with the default optimizer "
                             "and a model whose first dense layer reads the flattened input; use 'auto' or 'direct'")
        return None
    kernel_path, d, h = found
    platform = jax.default_backend() if platform is None else platform
    if mode == "gram" or (platform == "cpu" and gram_saves_work(fixed_x.shape[0], d, h, algorithm.epochs, models)):
        return kernel_path
    return None


def fixed_set_gram(fx) -> jax.Array:
    """``K = X X^T`` of the flattened fixed set ``[n, ...]`` (full float32 precision on every backend).

    >>> fixed_set_gram(jnp.ones((3, 2, 2))).tolist()
    [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]
    """
    x = jnp.asarray(fx)
    x = x.reshape(x.shape[0], -1)
    return jnp.matmul(x, x.T, precision=jax.lax.Precision.HIGHEST)


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def _with(tree, path, value):
    """A copy of a nested dict with ``path`` set to ``value`` (``value=None`` removes it)."""
    out = dict(tree)
    if len(path) == 1:
        if value is None:
            out.pop(path[0])
        else:
            out[path[0]] = value
        return out
    out[path[0]] = _with(tree[path[0]], path[1:], value)
    return out


def train_gram(model_fns: ModelFns, algorithm: Algorithm, fixed_set, target=None, *, key: jax.Array,
               init_params=None, target_weight: float | jax.Array = 1.0, gram: jax.Array | None = None,
               first_kernel: tuple | None = None) -> TrainResult:
    """:func:`~recon_jax.training.train` for full-batch GD through the fixed set's Gram matrix (module docstring).

    Args:
      model_fns, algorithm, fixed_set, target, key, init_params, target_weight: as for
        :func:`~recon_jax.training.train` (``algorithm`` must satisfy :func:`gram_supported`).
      gram: ``fixed_set_gram(fixed_set[0])``; pass it when training many models on one fixed set (vmap leaves it
        unbatched), else it is computed here.
      first_kernel: the parameter path of the first dense kernel (found with the tap if ``None``).

    Returns:
      A :class:`~recon_jax.training.TrainResult` (``trace`` is ``None``).

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd, initial_params, train
    >>> fns = from_flax(balle_mnist_mlp())
    >>> x, y = jax.random.uniform(jax.random.key(1), (32, 784)), jnp.arange(32) % 10
    >>> p0 = initial_params(fns, jax.random.key(0), x)
    >>> alg = full_batch_gd(epochs=20, learning_rate=0.05)
    >>> # The same training, reorganised: equal to float32 rounding at full-precision products (a GPU's default
    >>> # TF32 products round each formulation's operands differently, ~1e-3 apart after 20 steps)
    >>> with jax.default_matmul_precision("highest"):
    ...     a = train_gram(fns, alg, (x[1:], y[1:]), (x[0], y[0]), key=jax.random.key(2), init_params=p0)
    ...     b = train(fns, alg, (x[1:], y[1:]), (x[0], y[0]), key=jax.random.key(2), init_params=p0)
    >>> bool(jnp.allclose(a.params["Dense_0"]["kernel"], b.params["Dense_0"]["kernel"], atol=1e-5))
    True
    """
    alg = algorithm
    if not gram_algorithm(alg):
        raise ValueError("train_gram needs full-batch, non-private training with the default optimizer "
                         "(algorithm.batch_size None, clip_norm None, optimizer None)")
    if model_fns.tap is None:
        raise ValueError("train_gram needs a model with a tap (from_flax / from_haiku)")
    fx, fy = jnp.asarray(fixed_set[0]), jnp.asarray(fixed_set[1])
    n = fx.shape[0]
    params0 = starting_params(model_fns, alg, key, init_params, fx)
    if first_kernel is None:
        found = first_dense_layer(model_fns, params0, fx)
        if found is None:
            raise ValueError("train_gram needs a model whose first dense layer reads the flattened input "
                             "(see gram_supported)")
        first_kernel = found[0]
    first_kernel = tuple(first_kernel)
    xf = fx.reshape(n, -1)
    w0 = _get(params0, first_kernel)
    dtype = w0.dtype
    k = fixed_set_gram(fx) if gram is None else jnp.asarray(gram)
    if k.shape != (n, n):
        raise ValueError(f"gram must have shape ({n}, {n}), got {k.shape}")
    k = k.astype(dtype)
    base_f = xf @ w0  # [n, h]: unbatched under vmap when the initialisation is shared
    has_target = target is not None
    if has_target:
        tx = jnp.asarray(target[0])[None]
        ty = jnp.asarray(target[1]).reshape((1,))
        tw = jnp.asarray(target_weight, dtype)
        xt = tx.reshape(-1)
        base_t = xt @ w0
        u = xf @ xt  # [n]: X_- x_t
        s = xt @ xt
    zeros_kernel = jnp.zeros_like(w0)
    loss_fn = alg.loss_fn
    optimizer = alg.make_optimizer()

    def forward_params(rest):
        return _with(rest, first_kernel, zeros_kernel)  # x @ 0 + b + P: the layer's product comes from P

    def loss(rest, p_f, p_t):
        params = forward_params(rest)
        logits, _ = model_fns.tap(params, fx, [p_f])
        total = jnp.sum(loss_fn(logits, fy))
        count = jnp.asarray(n, dtype)
        if has_target:
            logits_t, _ = model_fns.tap(params, tx, [p_t[None]])
            total = total + tw * loss_fn(logits_t, ty)[0]
            count = count + tw
        return total / count

    grad_fn = jax.value_and_grad(loss, argnums=(0, 1, 2))

    def step(carry, _):
        (rest, a_f, a_t), opt_state = carry
        p_f = base_f + k @ a_f
        p_t = None
        if has_target:
            p_f = p_f + u[:, None] * a_t[None, :]
            p_t = base_t + u @ a_f + s * a_t
        value, (g_rest, g_f, g_t) = grad_fn(rest, p_f, p_t)
        grads = (g_rest, g_f, g_t if has_target else jnp.zeros_like(a_t))
        state = (rest, a_f, a_t)
        updates, opt_state = optimizer.update(grads, opt_state, state)
        state = jax.tree_util.tree_map(lambda p, d: p + d.astype(p.dtype), state, updates)
        return (state, opt_state), value

    h = w0.shape[1]
    state0 = (_with(params0, first_kernel, None), jnp.zeros((n, h), dtype), jnp.zeros((h,), dtype))
    carry0 = (state0, optimizer.init(state0))
    ((rest, a_f, a_t), _), losses = jax.lax.scan(step, carry0, None, length=alg.epochs)
    w = w0 + xf.T @ a_f
    if has_target:
        w = w + xt[:, None] * a_t[None, :]
    return TrainResult(params=_with(rest, first_kernel, w.astype(dtype)), losses=losses, trace=None)
