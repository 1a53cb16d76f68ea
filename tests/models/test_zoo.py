"""Model zoo, flax/Haiku adapters and flattening with a layout."""

import json

import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from recon_jax import models


def _n_dense(sizes, bias=True):
    # parameter count of a dense chain, written out independently of the code under test
    return sum(a * b + (b if bias else 0) for a, b in zip(sizes[:-1], sizes[1:]))


def _count(module, shape, key):
    # abstract init: shapes only, no compute
    return models.count_params(jax.eval_shape(module.init, key, jnp.zeros(shape))["params"])


def test_param_counts_match_papers(key):
    assert _count(models.balle_mnist_mlp(), (1, 28, 28, 1), key) == _n_dense([784, 10, 10]) == 7960  # Table IV
    # Table IV prints 79,420 for width 100, but its widths 1 (805) and 10 (7,960) follow 784*h + h + 10*h + 10,
    # which gives 79,510 for h = 100: the printed value is inconsistent with the architecture.
    assert _count(models.balle_mnist_mlp(hidden=100), (1, 784), key) == _n_dense([784, 100, 10]) == 79510
    assert _count(models.balle_mnist_mlp(hidden=1), (1, 784), key) == 805  # Table IV, width 1
    p = jax.eval_shape(models.biswas_mlp().init, key, jnp.zeros((1, 16, 16, 1)))["params"]
    assert models.count_params(p) == _n_dense([256, 50, 15, 10], bias=False) == 13700  # Biswas Sec. VI
    assert all("bias" not in path for path in models.layout_of(p).paths)
    conv = (4 * 4 * 3 * 16 + 16) + (4 * 4 * 16 * 32 + 32)
    assert _count(models.balle_cifar_cnn(), (1, 32, 32, 3), key) == conv + 12 * 12 * 32 * 10 + 10  # ~55K, Sec. VI-B
    net = models.lenet()
    variables = jax.eval_shape(net.init, key, jnp.zeros((1, 28, 28, 1)))
    assert jax.eval_shape(net.apply, variables, jnp.zeros((3, 28, 28, 1))).shape == (3, 10)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="activation"):
        models.balle_mnist_mlp(activation="swishy")
    with pytest.raises(ValueError, match="hidden"):
        models.balle_mnist_mlp(hidden=0)
    with pytest.raises(ValueError, match="module"):
        models.from_flax(object())
    with pytest.raises(ValueError, match="transformed"):
        models.from_haiku(object())


class _DropoutMLP(nn.Module):
    """An ordinary user model: dropout behind a ``train`` flag."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        h = nn.relu(nn.Dense(8)(x.reshape((x.shape[0], -1))))
        return nn.Dense(3)(nn.Dropout(0.5, deterministic=not train)(h))


def test_call_time_randomness_refused_and_switched_off_by_call_kwargs(key):
    x = jax.random.uniform(key, (4, 5))
    unflagged = models.from_flax(_DropoutMLP())
    params = unflagged.init(key, x)  # flax's init draws dropout from the params stream; a call has no stream
    with pytest.raises(ValueError, match=r"random stream.*dropout.*call_kwargs=\{'train': False\}"):
        unflagged.apply(params, x)
    with pytest.raises(ValueError, match="call_kwargs must be a dict"):
        models.from_flax(_DropoutMLP(), call_kwargs=(("train", False),))
    fns = models.from_flax(_DropoutMLP(), call_kwargs={"train": False})
    params = fns.init(key, x)
    # the reference: flax called directly with the flag, and the same module in training mode with a dropout stream
    direct = _DropoutMLP().apply({"params": params}, x, train=False)
    np.testing.assert_array_equal(fns.apply(params, x), direct)
    dropped = _DropoutMLP().apply({"params": params}, x, rngs={"dropout": jax.random.key(1)})
    assert not np.allclose(dropped, direct)  # so the flag really reached the module
    logits, calls = fns.tap(params, x, None)
    np.testing.assert_array_equal(logits, direct)
    assert [c.kernel_path for c in calls] == [("Dense_0", "kernel"), ("Dense_1", "kernel")]
    assert "'train': False" in fns.name
    assert models.from_flax(models.balle_mnist_mlp()).name == repr(models.balle_mnist_mlp())  # unchanged without


class _BatchNormMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.BatchNorm(use_running_average=False)(nn.Dense(8)(x)))


def test_batch_norm_state_refused_with_the_parameter_only_alternatives(key):
    match = r"non-parameter collections \['batch_stats'\].*nn\.GroupNorm or nn\.LayerNorm"
    with pytest.raises(ValueError, match=match):
        models.from_flax(_BatchNormMLP()).init(key, jnp.ones((4, 5)))


def _haiku_dropout_mlp(x, is_training=True):
    h = jax.nn.relu(hk.Linear(8)(x))
    if is_training:
        h = hk.dropout(hk.next_rng_key(), 0.5, h)
    return hk.Linear(3)(h)


def test_haiku_state_and_apply_time_randomness_refused_with_the_fix(key):
    x = jnp.ones((4, 5))
    with pytest.raises(ValueError, match=r"carries state.*hk\.transform_with_state.*hk\.GroupNorm"):
        models.from_haiku(hk.transform_with_state(_haiku_dropout_mlp))
    for t in (hk.transform(_haiku_dropout_mlp), hk.without_apply_rng(hk.transform(_haiku_dropout_mlp))):
        fns = models.from_haiku(t)
        params = fns.init(key, x)
        with pytest.raises(ValueError, match=r"draws random numbers.*is_training=False"):
            fns.apply(params, x)
    # the fix the message names: the same parameters, applied without dropout as haiku itself would
    off = hk.transform(lambda x: _haiku_dropout_mlp(x, is_training=False))
    np.testing.assert_array_equal(models.from_haiku(off).apply(params, x), off.apply(params, None, x))


def _haiku_mlp(x):
    x = x.reshape((x.shape[0], -1))
    return hk.nets.MLP([10, 10], activation=jax.nn.elu, w_init=hk.initializers.VarianceScaling(1.0))(x)


def haiku_to_flax(hk_params):
    """Maps Haiku MLP parameters onto the flax MLP's names (w -> kernel, b -> bias)."""
    return {f"Dense_{i}": {"kernel": hk_params[f"mlp/~/linear_{i}"]["w"], "bias": hk_params[f"mlp/~/linear_{i}"]["b"]}
            for i in range(2)}


@pytest.mark.parametrize("rngless", [False, True])
def test_haiku_and_flax_mlp_agree_with_same_parameters(key, rngless):
    t = hk.transform(_haiku_mlp)
    hk_fns = models.from_haiku(hk.without_apply_rng(t) if rngless else t)
    fl_fns = models.from_flax(models.balle_mnist_mlp())
    x = jax.random.uniform(key, (5, 28, 28, 1))
    hk_params = hk_fns.init(jax.random.fold_in(key, 1), x)
    hk_params = jax.tree_util.tree_map(lambda a: a + 0.1 * jnp.ones_like(a), hk_params)  # non-zero biases
    out_hk = hk_fns.apply(hk_params, x)
    out_fl = fl_fns.apply(haiku_to_flax(hk_params), x)
    # same float32 ops in the same order up to XLA fusion choices
    np.testing.assert_allclose(out_hk, out_fl, rtol=1e-6, atol=1e-6)
    assert models.count_params(hk_params) == 7960


def test_ravel_layout_unravel_roundtrip(key):
    params = models.balle_mnist_mlp().init(key, jnp.zeros((1, 784)))["params"]
    flat, layout = models.ravel(params)
    ref, _ = ravel_pytree(params)
    np.testing.assert_array_equal(flat, ref)
    assert layout.size == 7960
    assert [e.path for e in layout.entries] == ["Dense_0/bias", "Dense_0/kernel", "Dense_1/bias", "Dense_1/kernel"]
    for e in layout.entries:
        leaf = params[e.path.split("/")[0]][e.path.split("/")[1]]
        np.testing.assert_array_equal(flat[e.offset:e.offset + e.size].reshape(e.shape), leaf)
    back = models.unravel(flat, layout)
    jax.tree_util.tree_map(np.testing.assert_array_equal, back, jax.tree_util.tree_map(np.asarray, params))
    batched = models.unravel(jnp.stack([flat, 2 * flat]), layout)
    np.testing.assert_array_equal(batched["Dense_1"]["kernel"][1], 2 * params["Dense_1"]["kernel"])
    assert models.Layout.from_json(layout.to_json()) == layout


def test_haiku_layout_unravel_roundtrip_keeps_module_names(key):
    """Haiku's module names contain "/" ("mlp/~/linear_0"): unravel must rebuild that one key, not mlp -> ~ -> ..."""
    fns = models.from_haiku(hk.transform(_haiku_mlp))
    params = fns.init(key, jnp.zeros((1, 6)))
    flat, layout = models.ravel(params)
    assert layout.paths == ("mlp/~/linear_0/b", "mlp/~/linear_0/w", "mlp/~/linear_1/b", "mlp/~/linear_1/w")
    for lay in (layout, models.Layout.from_json(json.loads(json.dumps(layout.to_json())))):
        back = models.unravel(flat, lay)
        assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(params)
        jax.tree_util.tree_map(np.testing.assert_array_equal, back, jax.tree_util.tree_map(np.asarray, params))
        assert lay == layout
    batched = models.unravel(jnp.stack([flat, 2 * flat]), layout)
    np.testing.assert_array_equal(batched["mlp/~/linear_1"]["w"][1], 2 * params["mlp/~/linear_1"]["w"])
    # a module's path prefix still selects that module's leaves (b then w, in flat order)
    first = params["mlp/~/linear_0"]
    expected = np.concatenate([np.asarray(first["b"]), np.asarray(first["w"]).ravel()])
    np.testing.assert_array_equal(models.select(flat, layout, "mlp/~/linear_0"), expected)
    assert models.select_indices(layout, "mlp").size == flat.size


def test_layout_json_writes_keys_only_for_ambiguous_paths():
    """The manifest's layout JSON of a flax-like tree (no "/" in any key) is byte-for-byte what it always was, written
    out by hand here; an entry whose key holds "/" also records its keys."""
    flax_like = {"Dense_0": {"bias": jnp.zeros(2), "kernel": jnp.zeros((3, 2))}}
    assert json.dumps(models.layout_of(flax_like).to_json()) == (
        '[{"path": "Dense_0/bias", "shape": [2], "offset": 0, "size": 2, "dtype": "float32"}, '
        '{"path": "Dense_0/kernel", "shape": [3, 2], "offset": 2, "size": 6, "dtype": "float32"}]')
    haiku_like = {"mlp/~/linear_0": {"w": jnp.zeros((3, 2))}}
    assert json.dumps(models.layout_of(haiku_like).to_json()) == (
        '[{"path": "mlp/~/linear_0/w", "shape": [3, 2], "offset": 0, "size": 6, "dtype": "float32", '
        '"keys": ["mlp/~/linear_0", "w"]}]')


def test_colliding_paths_keep_every_leaf():
    """{"a/b": x, "a": {"b": y}} joins both leaves to the path "a/b": unravel keeps both, selecting "a/b" takes both."""
    params = {"a/b": jnp.zeros(1), "a": {"b": jnp.ones(2)}}
    flat, layout = models.ravel(params)
    assert layout.paths == ("a/b", "a/b")
    for lay in (layout, models.Layout.from_json(json.loads(json.dumps(layout.to_json())))):
        back = models.unravel(flat, lay)
        assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(params)
        jax.tree_util.tree_map(np.testing.assert_array_equal, back, jax.tree_util.tree_map(np.asarray, params))
    assert models.select_indices(layout, "a/b").tolist() == [0, 1, 2]



def test_select_indices_keeps_a_leaf_after_a_zero_size_one():
    """A zero-size leaf shares its offset with the next leaf: taking each matched leaf once must not drop that one."""
    layout = models.ravel({"a": jnp.zeros((0,)), "b": jnp.ones(3), "c": {"d": jnp.ones(2)}})[1]
    assert [(e.offset, e.size) for e in layout.entries] == [(0, 0), (0, 3), (3, 2)]
    assert models.select_indices(layout, ["a", "b", "*"]).tolist() == [0, 1, 2, 3, 4]
    assert models.select_indices(layout, ["a", "c"]).tolist() == [3, 4]


def test_layout_entry_keys_are_checked():
    with pytest.raises(ValueError, match="keys must be strings"):
        models.LayoutEntry("a/b", (1,), 0, 1, "float32", keys=("a", "c"))
    with pytest.raises(ValueError, match="keys must be strings"):
        models.LayoutEntry("a/1", (1,), 0, 1, "float32", keys=("a", 1))
    clash = models.Layout((models.LayoutEntry("a", (1,), 0, 1, "float32"),
                           models.LayoutEntry("a/b", (1,), 1, 1, "float32", keys=("a", "b"))))
    with pytest.raises(ValueError, match="collide"):
        models.unravel(jnp.zeros(2), clash)
    with pytest.raises(ValueError, match="collide"):
        models.unravel(jnp.zeros(2), models.Layout(clash.entries[:1] * 2))


def test_select_layers(key):
    params = models.balle_mnist_mlp().init(key, jnp.zeros((1, 784)))["params"]
    flat, layout = models.ravel(params)
    second = models.select(np.stack([np.asarray(flat)] * 3), layout, "Dense_1")
    assert second.shape == (3, 110)  # Balle et al. App. F: the second layer has 110 parameters
    expected = np.concatenate([np.asarray(params["Dense_1"]["bias"]), np.asarray(params["Dense_1"]["kernel"]).ravel()])
    np.testing.assert_array_equal(second[0], expected)
    assert models.select_indices(layout, ["*/kernel"]).size == 7840 + 100
    with pytest.raises(ValueError, match="matches no parameter"):
        models.select_indices(layout, "Dense_7")
