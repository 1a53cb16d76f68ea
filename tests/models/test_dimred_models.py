"""Shapes of the Lumbut & Ponnoprat networks (Tables 1, 3, 5), the Balle MLP, and the transposed-conv geometry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.models import dimred as M


def _shapes(net, theta_shape, **kw):
    """Parameter and intermediate shapes via eval_shape (no FLOPs)."""
    x = jax.ShapeDtypeStruct(theta_shape, jnp.float32)
    variables = jax.eval_shape(lambda t: net.init(jax.random.key(0), t), x)
    out, state = jax.eval_shape(
        lambda v, t: net.apply(v, t, capture_intermediates=True, mutable=["intermediates"], **kw), variables, x
    )
    return variables, out, state["intermediates"]


def test_split_encoder_table1_and_mnist_decoder_table3():
    n = 100  # |D-| = 99
    net = M.make_reconstructor("split", image_shape=(28, 28, 1), width=64)
    variables, out, inter = _shapes(net, (3, 2 * n))
    p = variables["params"]
    # Table 1: split 2 + (2n - 2), dense 16 + 64, concatenated to 80.
    assert p["encoder"]["target_dense"]["kernel"].shape == (2, 16)
    assert p["encoder"]["context_dense"]["kernel"].shape == (2 * n - 2, 64)
    assert inter["encoder"]["__call__"][0].shape == (3, 80)
    # Table 3: 512 (4x4 s1 p0) -> 256 -> 128 -> 64 (4x4 s2 p1) -> 1 (1x1, padding 2) -> 28x28.
    d = inter["decoder"]
    expected = {"convt0": (4, 4, 512), "convt1": (8, 8, 256), "convt2": (16, 16, 128), "convt3": (32, 32, 64),
                "convt_out": (32, 32, 1)}
    for name, shape in expected.items():
        assert d[name]["__call__"][0].shape == (3, *shape), name
    kernels = {k: v["kernel"].shape for k, v in p["decoder"].items() if "kernel" in v}
    assert kernels == {"convt0": (4, 4, 80, 512), "convt1": (4, 4, 512, 256), "convt2": (4, 4, 256, 128),
                       "convt3": (4, 4, 128, 64), "convt_out": (1, 1, 64, 1)}
    assert set(variables["batch_stats"]["decoder"]) == {"bn0", "bn1", "bn2", "bn3"}
    assert out.shape == (3, 28, 28, 1)


def test_chest64_decoder_table5():
    net = M.make_reconstructor("split", image_shape=(64, 64, 1), width=64)
    variables, out, inter = _shapes(net, (2, 20))
    d = inter["decoder"]
    expected = {"convt0": (4, 4, 512), "convt1": (8, 8, 1024), "convt2": (16, 16, 512), "convt3": (32, 32, 256),
                "convt_out": (64, 64, 1)}
    for name, shape in expected.items():
        assert d[name]["__call__"][0].shape == (2, *shape), name
    assert out.shape == (2, 64, 64, 1)


def test_balle_mlp_2x1000():
    net = M.make_reconstructor("mlp", image_shape=(28, 28, 1))
    variables, out, _ = _shapes(net, (5, 400))
    p = variables["params"]
    assert [p[k]["kernel"].shape for k in ("dense0", "dense1", "out")] == [(400, 1000), (1000, 1000), (1000, 784)]
    assert out.shape == (5, 28, 28, 1)


def test_encoder_target_branch_reads_only_the_target_row():
    enc = M.SplitEncoder(target_row=3)
    theta = jax.random.normal(jax.random.key(1), (1, 20))
    v = enc.init(jax.random.key(0), theta)
    jac = jax.jacobian(lambda t: enc.apply(v, t)[0])(theta)[:, 0, :]  # [80, 20]
    target_cols = np.abs(np.asarray(jac[:16])).sum(axis=0)
    context_cols = np.abs(np.asarray(jac[16:])).sum(axis=0)
    assert set(np.nonzero(target_cols)[0]) == {6, 7}
    assert set(np.nonzero(context_cols)[0]) == set(range(20)) - {6, 7}


def _torch_convt_naive(x, w, stride, pad):
    """PyTorch ConvTranspose2d definition (scatter form), NHWC input, kernel [k, k, cin, cout], no bias."""
    h, wd, _ = x.shape
    k = w.shape[0]
    full = np.zeros(((h - 1) * stride + k, (wd - 1) * stride + k, w.shape[3]))
    for i in range(h):
        for j in range(wd):
            full[i * stride : i * stride + k, j * stride : j * stride + k] += np.einsum("c,abcd->abd", x[i, j], w)
    return full[pad : full.shape[0] - pad, pad : full.shape[1] - pad]


# (4, 2, 1) and (4, 1, 0) on 1x1 take the fast paths of TorchConvTranspose, (1, 1, 0) the pointwise one, the
# others lax.conv_transpose.
@pytest.mark.parametrize("k,s,p,size", [(4, 2, 1, 3), (4, 2, 1, 6), (4, 1, 0, 1), (1, 1, 0, 4), (3, 2, 1, 4),
                                        (4, 1, 0, 3)])
def test_convtranspose_matches_pytorch_definition(x64, k, s, p, size):
    layer = M._torch_convt(2, k, s, p, name="c")
    x = np.random.default_rng(0).standard_normal((1, size, size, 3))
    v = layer.init(jax.random.key(0), jnp.asarray(x))
    w = np.asarray(v["params"]["kernel"])
    out = np.asarray(layer.apply(v, jnp.asarray(x)))[0]
    # flax (transpose_kernel=False) correlates the dilated input, i.e. scatters the spatially flipped kernel.
    ref = _torch_convt_naive(x[0], w[::-1, ::-1], s, p)
    assert out.shape == ref.shape == ((size - 1) * s - 2 * p + k,) * 2 + (2,)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)  # float64: exact up to summation order


@pytest.mark.parametrize("k,s,p,size", [(4, 2, 1, 5), (4, 1, 0, 1), (1, 1, 0, 3)])
def test_fast_convtranspose_equals_flax_including_gradients(x64, k, s, p, size):
    import flax.linen as nn

    fast = M.TorchConvTranspose(4, k, s, p)
    ref = nn.ConvTranspose(4, (k, k), (s, s), padding=((k - 1 - p, k - 1 - p),) * 2, use_bias=False)
    x = jnp.asarray(np.random.default_rng(1).standard_normal((2, size, size, 3)))
    v_ref = ref.init(jax.random.key(0), x)
    v_fast = fast.init(jax.random.key(0), x)
    # same parameter name, shape and initial values: checkpoints and seeds carry over
    np.testing.assert_array_equal(np.asarray(v_fast["params"]["kernel"]), np.asarray(v_ref["params"]["kernel"]))
    v = jax.tree_util.tree_map(lambda a: a.astype(jnp.float64), v_ref)
    np.testing.assert_allclose(np.asarray(fast.apply(v, x)), np.asarray(ref.apply(v, x)), rtol=1e-12, atol=1e-12)

    def loss(m):
        return lambda vv, xx: jnp.sum(jnp.sin(m.apply(vv, xx)))

    for argnum in (0, 1):
        g_fast = jax.grad(loss(fast), argnums=argnum)(v, x)
        g_ref = jax.grad(loss(ref), argnums=argnum)(v, x)
        for a, b in zip(jax.tree_util.tree_leaves(g_fast), jax.tree_util.tree_leaves(g_ref)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-11, atol=1e-12)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="kind"):
        M.make_reconstructor("cnn")
    with pytest.raises(ValueError, match="image_shape"):
        M.make_reconstructor("split", image_shape=(32, 32, 1))
    with pytest.raises(ValueError, match="width"):
        M.make_reconstructor("split", width=0)
    enc = M.SplitEncoder(target_row=5)
    with pytest.raises(ValueError, match="target_row"):
        enc.init(jax.random.key(0), jnp.zeros((1, 8)))
