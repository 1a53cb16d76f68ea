"""The shadow-model engine: one model per target, ``jax.jit(jax.vmap(train))`` over chunks, sharded over devices.

Balle et al. (Sec. IV, Alg. 1 step 1) train one shadow model ``theta_i = A(D_- U {z_i})`` per shadow target;
their informed MIA (Alg. 2) and Lumbut et al.'s attack need the same. :func:`generate_shadow_models` writes
the single-model trainer once (:func:`recon_jax.training.train`, epochs in ``lax.scan``), vmaps it over a chunk
of targets with the fixed set entering *unbatched* (``in_axes=None``) and the target as a separate loss term,
jits it once, and shards the model axis over a ``jax.sharding.Mesh`` of all devices (one CPU device, N fake
CPU devices, GPUs/TPUs, several hosts after ``jax.distributed.initialize()``): ``shard_map`` gives each device its
slice of every chunk. Every model of the zoo, flax's ``nn.Conv`` and haiku's convolutions (XLA's convolution,
``conv_impl="lax"``, as well as the patch form) train this way with every algorithm
(:mod:`recon_jax.shadow.conv_batching` routes around a JAX batching rule that DP training of XLA convolutions hits).
Before training, the engine traces and compiles its program: an unsupported combination of model, algorithm and
devices stops there with a ``ValueError`` saying what to change (:mod:`recon_jax.shadow.support`).

For full-batch, non-private training (Balle et al.'s default) of a model whose first dense layer reads the
flattened input, each model trains that layer through the fixed set's Gram matrix, computed once and shared
(:mod:`recon_jax.training.gram`): one ``n x n`` product per step instead of two ``n x d`` ones, the same models
up to float rounding (``first_layer="direct"`` turns it off).

Model i uses ``key_i = fold_in(key, i)``; the models do not depend on the chunk size, the device count or the
resume point. With ``store=`` the outputs stream to a resumable :class:`~recon_jax.shadow.store.ShadowStore`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tqdm.auto import tqdm

from recon_jax.io import ABOVE_STORES, array_digest, library_code
from recon_jax.mechanisms.base import GaussianMechanism
from recon_jax.models.adapters import ModelFns, model_identity
from recon_jax.models.flatten import layout_of
from recon_jax.models.losses import softmax_cross_entropy
from recon_jax.shadow.arguments import ShadowOutputs, check_label_range, check_shadow_args
from recon_jax.shadow.conv_batching import without_conv_out_sharding
from recon_jax.shadow.devices import MODEL_AXIS, default_mesh
from recon_jax.shadow.store import ShadowSet, ShadowStore, host_key_data, key_fingerprint
from recon_jax.shadow.support import explain_failures
from recon_jax.training.algorithms import Algorithm
from recon_jax.training.ghost import ghost_supported
from recon_jax.training.gram import choose_first_layer, fixed_set_gram, train_gram
from recon_jax.training.train import train

__all__ = ["generate_shadow_models", "preflight", "shadow_model_fn", "SharedInputs"]

# The layers of recon_jax above this one (tests/test_layers.py): no code of theirs runs while the engine trains, so
# the store's code record leaves them out (an edit of an attack keeps shadow models usable).
ABOVE_ENGINE = ("attacks", *ABOVE_STORES)


class SharedInputs(flax.struct.PyTreeNode):
    """What every model of a shadow run reads besides its own target (replicated on every device).

    Attributes:
      fixed_x: ``[n, ...]`` the fixed set D-'s inputs.
      fixed_y: ``[n]`` its labels.
      init_params: the adversary-known initial parameters, or None (random initialisation).
      key: the base key (model i uses ``fold_in(key, i)``); inside the engine's program its raw key data.
      shuffle_key: the shared shuffling key, or None where the algorithm does not use one.
      probe: ``[m, ...]`` probe inputs of the ``"probe_logits"`` output, or None.
      eval_x: evaluation inputs of the ``"eval_accuracy"`` output, or None.
      eval_y: their labels, or None.
      gram: the fixed set's Gram matrix (:func:`~recon_jax.training.gram.fixed_set_gram`) when the first dense
        layer trains through it, else None.
    """

    fixed_x: Any
    fixed_y: Any
    init_params: Any
    key: Any
    shuffle_key: Any = None
    probe: Any = None
    eval_x: Any = None
    eval_y: Any = None
    gram: Any = None


def shadow_model_fn(model_fns: ModelFns, algorithm: Algorithm, outputs: Sequence[str] = ("params",),
                    first_kernel: tuple | None = None):
    """The single-model function the engine vmaps: ``(index, tx, ty, tw, shared) -> dict of outputs``.

    ``shared`` is a :class:`SharedInputs` (fixed set, initial parameters, base key, shuffling key, probe and
    evaluation inputs); with ``first_kernel`` (the path of the first dense kernel) its ``gram`` is set and each
    model trains with :func:`~recon_jax.training.gram.train_gram`, else with
    :func:`~recon_jax.training.train`. Exposed for users who want to vmap/pmap it themselves; the engine is
    ``jit(shard_map(vmap(fn, in_axes=(0, 0, 0, 0, None))))`` over the ``"models"`` axis. The function is evaluated
    from its jaxpr with the convolutions' ``out_sharding`` annotations dropped where they constrain nothing
    (:mod:`recon_jax.shadow.conv_batching`: JAX cannot vmap a DP-trained or grouped XLA convolution inside
    ``shard_map`` otherwise); the values are those of the direct trace.

    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd
    >>> fn = shadow_model_fn(from_flax(balle_mnist_mlp()), full_batch_gd(epochs=1), ("target_loss",))
    >>> callable(fn)
    True
    """
    outputs = tuple(outputs)

    def one(index, tx, ty, tw, shared):
        key = jax.random.fold_in(shared.key, index)
        fixed = (shared.fixed_x, shared.fixed_y)
        if first_kernel is not None:
            res = train_gram(model_fns, algorithm, fixed, (tx, ty), key=key, init_params=shared.init_params,
                             target_weight=tw, gram=shared.gram, first_kernel=first_kernel)
        else:
            res = train(model_fns, algorithm, fixed, (tx, ty), key=key, init_params=shared.init_params,
                        shuffle_key=shared.shuffle_key, target_weight=tw)
        params = res.params
        out = {}
        if "params" in outputs:
            out["params"] = ravel_pytree(params)[0]
        if "probe_logits" in outputs:
            out["probe_logits"] = model_fns.apply(params, shared.probe)
        if "eval_accuracy" in outputs:
            pred = jnp.argmax(model_fns.apply(params, shared.eval_x), axis=-1)
            out["eval_accuracy"] = jnp.mean((pred == shared.eval_y).astype(jnp.float32))
        if "target_loss" in outputs:
            out["target_loss"] = algorithm.loss_fn(model_fns.apply(params, tx[None]), ty.reshape((1,)))[0]
        if "final_loss" in outputs:
            out["final_loss"] = res.losses[-1]
        return out

    # Every model goes through the same route (a no-op rewrite for models without XLA convolutions): see
    # recon_jax.shadow.conv_batching for why JAX's convolution batching rule needs it inside the engine's shard_map.
    return without_conv_out_sharding(one)


@functools.lru_cache(maxsize=32)
def _compiled(model_fns: ModelFns, algorithm: Algorithm, outputs: tuple, mesh: Mesh, key_impl: str,
              first_kernel: tuple | None):
    one = shadow_model_fn(model_fns, algorithm, outputs, first_kernel)

    def local_chunk(index, tx, ty, tw, shared):
        shuffle_key = shared.shuffle_key
        if shuffle_key is not None:
            shuffle_key = jax.random.wrap_key_data(shuffle_key, impl=key_impl)
        shared = shared.replace(key=jax.random.wrap_key_data(shared.key, impl=key_impl), shuffle_key=shuffle_key)
        return jax.vmap(one, in_axes=(0, 0, 0, 0, None))(index, tx, ty, tw, shared)

    # Each device trains its own slice of the chunk: shard_map over the models axis, not XLA's automatic SPMD
    # partitioning of jit(vmap(...)). With jax/jaxlib 0.10.2 on two CPU devices the partitioner computed wrongly the
    # feature-grouped convolution that vmap makes of a kernel gradient whose input and cotangent both vary by model
    # (the target's loss term): models came out wrong by ~1e-2 after two steps of GD (every model on the second
    # device for a one-conv CNN, all of them for Balle et al.'s CIFAR-10 CNN; tests/shadow/test_engine_matrix.py),
    # under GSPMD and Shardy alike; not tested on GPU/TPU. The patch-conv and dense programs give bitwise the same
    # models either way. check_vma=False: the models are independent, so nothing may be reduced over the axis (with
    # varying-axis checks on, the gradient of the replicated initial parameters would be psum-ed over the devices,
    # mixing their models).
    chunk_fn = jax.shard_map(local_chunk, mesh=mesh, in_specs=(P(MODEL_AXIS),) * 4 + (P(),), out_specs=P(MODEL_AXIS),
                             check_vma=False)

    batched = NamedSharding(mesh, P(MODEL_AXIS))
    replicated = NamedSharding(mesh, P())
    return jax.jit(chunk_fn, in_shardings=(batched, batched, batched, batched, replicated),
                   out_shardings=batched), batched, replicated


def _default_chunk_per_device(mesh: Mesh, model_fns: ModelFns, init_params, fx) -> int:
    """256 models per device on GPU/TPU. On CPU: 16 for models made of dense layers only (vmapped products stay
    in cache; fastest for the Balle MLP in ``benchmarks/shadow.py``), 1 for anything else: vmapping a CNN's
    training over models runs ~1.2x slower per model than training one at a time on XLA:CPU, so each device
    trains one model per call (Balle CIFAR-10 CNN, 2 single-threaded devices: 14.2 vs 11.1 models/s at 16)."""
    if not all(d.platform == "cpu" for d in mesh.devices.flat):
        return 256
    params = init_params
    if params is None:
        params = jax.eval_shape(model_fns.init, jax.random.key(0), jnp.asarray(fx[:1]))
    return 16 if ghost_supported(model_fns.tap, params, jnp.asarray(fx[:2])) else 1


@functools.lru_cache(maxsize=64)
def _output_specs(fn, chunk, example_shape, dtype, label_dtype, treedef, leaf_specs) -> dict:
    """Per-model output shapes and dtypes of ``fn`` (abstract evaluation, cached: tracing ``train`` is slow)."""
    shared = jax.tree_util.tree_unflatten(treedef, [jax.ShapeDtypeStruct(s, d) for s, d in leaf_specs])
    abstract = jax.eval_shape(fn, jax.ShapeDtypeStruct((chunk,), np.int32),
                              jax.ShapeDtypeStruct((chunk, *example_shape), dtype),
                              jax.ShapeDtypeStruct((chunk,), label_dtype), jax.ShapeDtypeStruct((chunk,), dtype),
                              shared)
    return {k: (tuple(v.shape[1:]), np.dtype(v.dtype).str) for k, v in abstract.items()}


def _global(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a host array every process holds in full (works single- and multi-process)."""
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def _to_host(tree) -> dict:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree_util.tree_map(np.asarray, tree)


def _check_init_params(model_fns: ModelFns, init_params, fx) -> None:
    """init_params must have the tree and shapes the model's init gives (another width's parameters ran into a
    flax shape error inside the compiled trainer)."""
    want = jax.eval_shape(model_fns.init, jax.random.key(0), jax.ShapeDtypeStruct((1,) + fx.shape[1:], fx.dtype))
    leaves = jax.tree_util.tree_leaves_with_path
    shapes = [(jax.tree_util.keystr(p), tuple(np.shape(a))) for p, a in leaves(init_params)]
    wanted = [(jax.tree_util.keystr(p), tuple(a.shape)) for p, a in leaves(want)]
    if shapes != wanted:
        diff = [f"{w} != {g}" for w, g in zip(wanted, shapes) if w != g][:3] or [f"{len(wanted)} != {len(shapes)}"]
        raise ValueError(f"init_params must match the model's parameters (model != init_params): {diff}")


# The engine's one entry point: the five positional arguments say what is trained (model, algorithm, D-, targets,
# key); every keyword is an independent option whose default is the common case (known initialisation and shuffle,
# MIA target weights, outputs; how to run: chunk, mesh, store, progress, dtype, first-layer path), and a call sets
# two or three, so one options object would add a construction to every call without removing a concept.
# Many parameters because each keyword is an independent option with a common-case default.
def generate_shadow_models(model_fns: ModelFns, algorithm: Algorithm, fixed_set, targets, key: jax.Array, *,
                           init_params=None, shuffle_key: jax.Array | None = None, target_weights=None,
                           probe_inputs=None, eval_set=None, outputs: Sequence[str] | ShadowOutputs = ("params",),
                           chunk_size: int | None = None, mesh: Mesh | None = None, store: str | None = None,
                           progress: bool = True, dtype=None, first_layer: str = "auto",
                           desc: str = "shadow models") -> ShadowSet:
    """Trains one model per target on ``fixed_set + {target_i}`` and returns (or stores) their outputs.

    Args:
      model_fns: the model (:class:`~recon_jax.models.ModelFns`, flax or Haiku).
      algorithm: the training :class:`~recon_jax.training.Algorithm` (the released model's algorithm).
      fixed_set: ``(x [n, ...], y [n])``, the fixed set D_- (host or device arrays).
      targets: ``(x [K, ...], y [K])``, one target per model.
      key: base key; model i uses ``fold_in(key, i)`` (its random init, fresh shuffles and DP noise).
      init_params: the adversary-known initial parameters (required iff ``algorithm.init == "fixed"``).
      shuffle_key: shared shuffling key (required iff minibatches with ``algorithm.shuffle == "known"``).
      target_weights: optional ``[K]`` of 1 (train on target i) or 0 (MIA "out" model); default all 1.
      probe_inputs: ``[m, ...]`` inputs for ``"probe_logits"`` (Balle et al.'s black-box features).
      eval_set: ``(x, y)`` for ``"eval_accuracy"``.
      outputs: any of ``"params"`` (flat ``[P]``), ``"probe_logits"`` (``[m, classes]``), ``"eval_accuracy"``,
        ``"target_loss"`` (loss on the model's own target, for MIA), ``"final_loss"`` (last training loss); or a
        :class:`~recon_jax.shadow.arguments.ShadowOutputs` grouping the names with ``probe_inputs`` and
        ``eval_set`` (which are then not given separately).
      chunk_size: models per compiled call (rounded up to a multiple of the device count); bounds memory.
        Default: on CPU 16 per device for dense-only models (small per-device batches stay in cache: measured
        fastest for the Balle MLP, see ``benchmarks/shadow.py``) and 1 per device for other models (CNNs), 256
        per device on GPU/TPU.
      mesh: a 1-D mesh whose axis is named ``"models"``; default: all devices
        (:func:`~recon_jax.shadow.default_mesh`).
      store: a directory: stream chunks there atomically, resume a previous run with the same configuration,
        and return the memory-mapped result. ``None`` keeps everything in memory. A store made by other code (the
        recon_jax sources below ``attacks``, Python or a numeric package's version: :mod:`recon_jax.shadow.store`)
        is refused, and so is one begun on another backend (``jax.default_backend()``) or default matmul
        precision (``jax.default_matmul_precision``).
      progress: show a tqdm bar (models/s).
      desc: the bar's label: what these models are (``"shadow models"``, ``"released models"``, ...).
      dtype: cast inputs to this float dtype (default: the fixed set's float dtype, float32 for integers).
      first_layer: ``"direct"`` trains each model with :func:`~recon_jax.training.train`; ``"gram"`` trains the
        first dense layer through the fixed set's Gram matrix, shared by all models
        (:mod:`recon_jax.training.gram`: one ``n x n`` product per step instead of two ``n x d`` ones; full-batch,
        non-private training with the default optimizer, first dense layer on the flattened input; same
        models up to float rounding); ``"auto"`` (default) uses ``"gram"`` on CPU devices where it applies and saves
        work (on a GPU the direct path measured faster: :func:`~recon_jax.training.choose_first_layer`).

    Memory: each call holds one chunk of training states per device. DP algorithms on dense-layer models (MLPs)
    use ghost clipping (:mod:`recon_jax.training.ghost`) and need no per-example gradients; on other models they
    hold ``chunk x batch x P`` floats of per-example gradients: give them a ``microbatch_size`` and a smaller
    ``chunk_size``. With ``store``
    only the current chunk's outputs are in host memory; on several hosts the store directory must be on a
    filesystem all processes see (process 0 writes it).

    Returns:
      A :class:`~recon_jax.shadow.ShadowSet` (``arrays[name]`` has a leading model axis of size K).

    Raises:
      ValueError: on invalid arguments (:func:`~recon_jax.shadow.arguments.check_shadow_args`, and a mesh without a
        ``"models"`` axis); :class:`~recon_jax.shadow.UnsupportedConfiguration` (a ``ValueError`` naming the model,
        the algorithm, the devices and what to change, chained to the original error) if the program cannot be
        traced or compiled, before any model trains; :class:`~recon_jax.shadow.ShadowStoreMismatchError` if
        ``store`` holds a shadow set with a different configuration or made by other code.

    >>> import jax, jax.numpy as jnp
    >>> from recon_jax.models import from_flax, balle_mnist_mlp
    >>> from recon_jax.training import full_batch_gd, initial_params
    >>> fns = from_flax(balle_mnist_mlp())
    >>> x, y = jax.random.uniform(jax.random.key(1), (40, 784)), jnp.arange(40) % 10
    >>> p0 = initial_params(fns, jax.random.key(0), x)
    >>> s = generate_shadow_models(fns, full_batch_gd(epochs=5, learning_rate=0.05), (x[:32], y[:32]),
    ...                            (x[32:], y[32:]), jax.random.key(2), init_params=p0,
    ...                            outputs=("params", "target_loss"), chunk_size=4, progress=False)
    >>> s["params"].shape, s["target_loss"].shape
    ((8, 7960), (8,))
    """
    fx, fy, tx, ty, tw, dtype, outputs, shuffle_key, probe, ex, ey = check_shadow_args(
        algorithm, fixed_set, targets, init_params=init_params, shuffle_key=shuffle_key, target_weights=target_weights,
        probe_inputs=probe_inputs, eval_set=eval_set, outputs=outputs, chunk_size=chunk_size, dtype=dtype,
        first_layer=first_layer)
    count = tx.shape[0]

    mesh = default_mesh() if mesh is None else mesh
    if MODEL_AXIS not in mesh.axis_names:
        raise ValueError(f"mesh must have an axis named {MODEL_AXIS!r}, got {mesh.axis_names}")
    n_dev = mesh.shape[MODEL_AXIS]
    key_impl = str(jax.random.key_impl(key)) if hasattr(key, "dtype") else "threefry2x32"
    key_data = host_key_data(key)
    shuffle_data = host_key_data(shuffle_key)
    if init_params is not None:
        init_params = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype), init_params)

    # Everything that traces the model: a failure here (or in the compilation below) is a combination of model,
    # algorithm and devices the engine cannot run, reported as a ValueError that says what to change.
    explained = explain_failures(model_fns, algorithm, mesh, fx)
    with explained:
        if chunk_size is None:
            chunk_size = _default_chunk_per_device(mesh, model_fns, init_params, fx) * n_dev
        if init_params is not None:
            layout_params = init_params
            _check_init_params(model_fns, init_params, fx)
        else:
            layout_params = jax.eval_shape(lambda k: model_fns.init(k, jnp.asarray(fx[:1])), jax.random.key(0))
        layout = layout_of(layout_params)
        logits = jax.eval_shape(model_fns.apply, layout_params, jax.ShapeDtypeStruct((1,) + fx.shape[1:], dtype))
        first_kernel = choose_first_layer(first_layer, model_fns, algorithm, layout_params, fx, count,
                                          platform=mesh.devices.flat[0].platform)
        fn, batched, replicated = _compiled(model_fns, algorithm, outputs, mesh, key_impl, first_kernel)
    if algorithm.loss_fn is softmax_cross_entropy:  # a custom loss may read its labels otherwise
        check_label_range(logits.shape[-1], fixed_set=fy, targets=ty, eval_set=ey)
    chunk = -(-chunk_size // n_dev) * n_dev
    gram = None if first_kernel is None else np.asarray(jax.jit(fixed_set_gram)(fx))
    shared_host = SharedInputs(fixed_x=fx, fixed_y=fy, init_params=init_params, key=key_data,
                               shuffle_key=shuffle_data, probe=probe, eval_x=ex, eval_y=ey, gram=gram)
    shared = jax.tree_util.tree_map(lambda a: _global(a, replicated), shared_host)

    # Output specs from an abstract evaluation of one chunk.
    leaves, treedef = jax.tree_util.tree_flatten(shared)
    with explained:
        specs = _output_specs(fn, chunk, tuple(tx.shape[1:]), np.dtype(dtype).str, np.dtype(ty.dtype).str, treedef,
                              tuple((tuple(a.shape), np.dtype(a.dtype).str) for a in leaves))

    st, manifest = None, None
    if store is not None:
        config = {
            "model": model_identity(model_fns, fx[:1]),
            "algorithm": algorithm.describe(),
            "count": count,
            "dtype": np.dtype(dtype).name,
            "outputs": list(outputs),
            "key": key_fingerprint(key),  # [key_impl, array_digest(key_data)]
            "shuffle_key": None if shuffle_data is None else array_digest(shuffle_data),
            "fixed_set": [array_digest(fx), array_digest(fy)],
            "targets": [array_digest(tx), array_digest(ty), array_digest(tw)],
            "init_params": None if init_params is None else array_digest(ravel_pytree(init_params)[0]),
            "probe": None if probe is None else array_digest(probe),
            "eval_set": None if ex is None else [array_digest(ex), array_digest(ey)],
        }
        config["first_layer"] = "direct" if first_kernel is None else "gram"
        # Where the rows are computed changes them: a GPU's default matmul precision (TF32) rounds the per-example
        # gradients the clipping sees unlike a CPU's float32, so a store begun on one backend or precision is not
        # resumed on another.
        config["backend"] = jax.default_backend()
        config["matmul_precision"] = jax.config.jax_default_matmul_precision
        st = ShadowStore(store)
    else:
        ranges = [(0, count)]
        results = {k: np.empty((count, *s), d) for k, (s, d) in specs.items()}

    is_writer = jax.process_index() == 0
    if st is not None and is_writer:
        st.acquire()  # one writer at a time: waits while another process writes this store
    try:
        if st is not None:
            manifest = st.open(config, count, layout, specs, code=library_code(without=ABOVE_ENGINE))
            st.clean_leftovers(manifest)
            if manifest.get("complete"):
                return st.load()
            ranges = st.missing_ranges(manifest)

        pieces = [(s, min(s + chunk, e)) for a, e in ranges for s in range(a, e, chunk)]
        done = count - sum(e - s for s, e in pieces)
        if pieces:
            # Trace and compile the program every chunk runs before training any model: an unsupported
            # combination fails here, within seconds, not after earlier chunks; the chunks reuse the compiled
            # program (jit's compilation cache), so this costs nothing extra.
            abstract = [jax.ShapeDtypeStruct((chunk, *shape), dt, sharding=batched) for shape, dt in
                        (((), np.int32), (tuple(tx.shape[1:]), tx.dtype), ((), ty.dtype), ((), tw.dtype))]
            with explained:
                fn.lower(*abstract, shared).compile()

        def launch(start, stop):
            idx = np.arange(start, start + chunk)
            idx = np.minimum(idx, stop - 1)  # pad the last chunk with copies of its last model
            args = [_global(idx.astype(np.int32), batched), _global(tx[idx], batched), _global(ty[idx], batched),
                    _global(tw[idx], batched)]
            return fn(*args, shared)

        bar = tqdm(total=count, initial=done, unit="model", disable=not progress, desc=desc)
        pending = None
        for piece in pieces + [None]:
            launched = (piece, launch(*piece)) if piece is not None else None  # dispatch before fetching previous
            if pending is not None:
                (start, stop), out = pending
                host = {k: v[: stop - start] for k, v in _to_host(out).items()}
                if st is not None:
                    if is_writer:
                        st.write_chunk(start, stop, host)
                else:
                    for k, v in host.items():
                        results[k][start:stop] = v
                bar.update(stop - start)
            pending = launched
        bar.close()

        if st is not None and is_writer:
            st.consolidate(manifest)
    finally:
        if st is not None:
            st.release()
    if st is not None:
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils
            multihost_utils.sync_global_devices("recon_jax.shadow.consolidate")
        return st.load()
    return ShadowSet(arrays=results, layout=layout, count=count)


_PREFLIGHT_PASSED: set = set()


def _preflight_algorithm(algorithm: Algorithm) -> Algorithm:
    """``algorithm`` for one epoch, with a Gaussian mechanism's noise multiplier set to 1: neither changes the
    program the engine compiles (the epochs are a scan length, the multiplier a constant), so the DP settings of a
    noise sweep share one preflight."""
    mechanism = algorithm.mechanism
    if isinstance(mechanism, GaussianMechanism):
        mechanism = GaussianMechanism(noise_multiplier=1.0)
    return dataclasses.replace(algorithm, epochs=1, mechanism=mechanism)


def preflight(model_fns: ModelFns, algorithm: Algorithm, fixed_set, *, init_params=None, mesh: Mesh | None = None,
              dtype=None, first_layer: str = "auto") -> None:
    """Runs one tiny shadow job of ``algorithm`` on ``model_fns`` and the devices of ``mesh``; raises if the
    combination cannot run. Call it before long work made of several engine runs (the risk report checks every
    setting of its sweep this way before training any model).

    The job: one epoch, one model per device, a fixed set of the first ``max(2, batch_size)`` examples of
    ``fixed_set`` (a couple for full-batch training), through :func:`generate_shadow_models` itself (the same
    program structure, compiled and run on the requested devices). Passed configurations (model, algorithm up to
    its epochs and Gaussian noise multiplier, mesh, example shape, dtypes, initialisation, ``first_layer``) are
    remembered for the process, so a second call costs nothing.

    Args:
      model_fns: the model.
      algorithm: the training :class:`~recon_jax.training.Algorithm`.
      fixed_set: ``(x [n, ...], y [n])``: examples shaped and labelled like the real data (only the first few are
        used).
      init_params: as for :func:`generate_shadow_models` (required iff ``algorithm.init == "fixed"``).
      mesh: the devices (default: all, :func:`~recon_jax.shadow.default_mesh`).
      dtype: as for :func:`generate_shadow_models`.
      first_layer: as for :func:`generate_shadow_models`.

    Raises:
      ValueError: :class:`~recon_jax.shadow.support.UnsupportedConfiguration` naming the model, the algorithm, the
        devices and what to change, chained to the original error; or invalid arguments.

    Ghost clipping needs a model made of dense layers; a convolutional one stops in seconds:

    >>> import jax, numpy as np
    >>> from recon_jax.models import from_flax, ConvNet
    >>> from recon_jax.training import dp_gd, initial_params
    >>> fns = from_flax(ConvNet(conv_features=(2,), kernel_sizes=(3,), strides=(1,), dense_features=(3,)), name="cnn")
    >>> x, y = np.ones((6, 5, 5, 1), np.float32), np.arange(6) % 3
    >>> p0 = initial_params(fns, jax.random.key(0), x)
    >>> preflight(fns, dp_gd(1.0, noise_multiplier=1.0), (x, y), init_params=p0)  # runs: returns None
    >>> try:
    ...     preflight(fns, dp_gd(1.0, noise_multiplier=1.0, per_example="ghost"), (x, y), init_params=p0)
    ... except ValueError as err:
    ...     print(str(err).split(" on ")[0])  # then the devices, e.g. "on 2 cpu devices: ..."
    model 'cnn' cannot be trained with DP-GD (clip_norm=1.0, clipping='flat', per_example='ghost')
    """
    if not (isinstance(fixed_set, (tuple, list)) and len(fixed_set) == 2):
        raise ValueError("fixed_set must be a pair (x [n, ...], y [n])")
    fx, fy = np.asarray(fixed_set[0]), np.asarray(fixed_set[1])
    if fx.ndim < 1 or fx.shape[0] < 1 or fy.shape != fx.shape[:1]:
        raise ValueError(f"fixed_set must hold n >= 1 examples and n labels, got shapes {fx.shape} and {fy.shape}")
    mesh = default_mesh() if mesh is None else mesh
    tiny = _preflight_algorithm(algorithm)
    config = (model_fns, tiny, mesh, fx.shape[1:], fx.dtype.str, fy.dtype.str, None if dtype is None else
              np.dtype(dtype).str, init_params is None, first_layer)
    if config in _PREFLIGHT_PASSED:
        return
    n_dev = mesh.shape[MODEL_AXIS] if MODEL_AXIS in mesh.axis_names else 1
    m = min(fx.shape[0], max(2, tiny.batch_size or 2))
    pick = np.arange(n_dev) % m
    shuffle_key = jax.random.key(0) if tiny.batch_size is not None and tiny.shuffle == "known" else None
    generate_shadow_models(model_fns, tiny, (fx[:m], fy[:m]), (fx[pick], fy[pick]), jax.random.key(0),
                           init_params=init_params, shuffle_key=shuffle_key, outputs=("params",), chunk_size=n_dev,
                           mesh=mesh, progress=False, dtype=dtype, first_layer=first_layer)
    _PREFLIGHT_PASSED.add(config)
