import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import data
from recon_jax.attacks import glm


def _synthetic(family, n=60, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d) * 0.5
    t = x @ w + 0.3
    if family == "linear":
        y = t + 0.5 * rng.standard_normal(n)
    elif family == "logistic":
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-t))).astype(float)
    else:
        y = rng.poisson(np.exp(0.5 * t)).astype(float)
    return x, y


@pytest.mark.parametrize("family,l2", [("linear", 0.0), ("linear", 0.7), ("logistic", 0.0), ("logistic", 0.05),
                                        ("poisson", 0.0), ("poisson", 0.2)])
def test_theorem1_exact_recovery_synthetic(x64, family, l2):
    x, y = _synthetic(family)
    fit = glm.fit_glm(x, y, family, l2=l2, tol=1e-12)
    # The fit is at optimality: its gradient vanishes (checked with an independent NumPy gradient).
    xi = np.concatenate([np.ones((len(x), 1)), x], 1)
    mean = {"linear": lambda t: t, "logistic": lambda t: 1 / (1 + np.exp(-t)), "poisson": np.exp}[family]
    theta = np.asarray(fit.theta)
    np.testing.assert_allclose(xi.T @ (mean(xi @ theta) - y) + 2 * l2 * theta, 0, atol=1e-9)
    x_hat, y_hat = glm.reconstruct_glm(fit.theta, x[1:], y[1:], family, l2=l2)
    # Solver tolerance 1e-12 on the gradient: recovery to ~1e-8 is "exact" here.
    np.testing.assert_allclose(x_hat, x[0], atol=1e-8)
    np.testing.assert_allclose(y_hat, y[0], atol=1e-8)


def test_theorem1_exact_recovery_mnist_logistic_zero_vs_one(x64):
    images, labels = data.load_dataset("mnist", "test")
    keep = np.flatnonzero(labels <= 1)[:301]
    x = images[keep].reshape(len(keep), -1).astype(np.float64)
    y = labels[keep].astype(np.float64)
    l2 = 1e-2  # separable classes: the regulariser makes the optimum unique and finite.
    fit = glm.fit_glm(x, y, "logistic", l2=l2, tol=1e-11)
    assert float(fit.grad_norm) < 1e-11
    target = 17
    mask = np.arange(len(x)) != target
    x_hat, y_hat = glm.reconstruct_glm(fit.theta, x[mask], y[mask], "logistic", l2=l2)
    np.testing.assert_allclose(x_hat, x[target], atol=1e-6)
    assert abs(float(y_hat) - y[target]) < 1e-6


def test_theorem1_singular_system_raises():
    theta = jnp.array([1.0, 2.0])
    fixed_x, fixed_y = jnp.array([[0.0], [1.0]]), jnp.array([1.0, 3.0])  # residuals exactly zero
    with pytest.raises(ValueError, match="singular"):
        glm.reconstruct_glm(theta, fixed_x, fixed_y, "linear")
    x_hat, _ = jax.jit(lambda t: glm.reconstruct_glm(t, fixed_x, fixed_y, "linear"))(theta)
    assert not np.isfinite(np.asarray(x_hat)).any()


def test_theorem8_least_squares_without_intercept(x64):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 4))
    y = x @ rng.standard_normal(4) + rng.standard_normal(40)
    theta = np.linalg.lstsq(x, y, rcond=None)[0]
    candidates = glm.reconstruct_least_squares_no_intercept(theta, x[1:], y[1:], y[0])
    err = np.min(np.abs(np.asarray(candidates) - x[0]).max(axis=1))
    assert err < 1e-9
    # Both candidates satisfy the optimality condition x (x^T theta - y) = -X-^T (X- theta - Y-).
    v = x[1:].T @ (x[1:] @ theta - y[1:])
    for c in np.asarray(candidates):
        np.testing.assert_allclose(c * (c @ theta - y[0]), -v, atol=1e-8)


def test_validation():
    with pytest.raises(ValueError, match="family"):
        glm.fit_glm(np.zeros((3, 1)), np.zeros(3), "probit")
    with pytest.raises(ValueError, match="l2"):
        glm.fit_glm(np.zeros((3, 1)), np.zeros(3), "linear", l2=-1.0)
    with pytest.raises(ValueError, match="features"):
        glm.reconstruct_glm(jnp.zeros(3), jnp.zeros((4, 5)), jnp.zeros(4), "linear")


_X, _Y = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([0.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_iter=0), "max_iter must be an integer >= 1; got 0"),  # returned theta = 0 without a step
    (dict(max_iter=-3), "max_iter must be an integer >= 1; got -3"),
    (dict(max_iter=2.5), "max_iter must be an integer >= 1"),
    (dict(l2=-1.0), "l2 must be finite and >= 0"),
    (dict(l2=float("inf")), "l2 must be finite and >= 0"),
    (dict(l2=float("nan")), "l2 must be finite and >= 0"),
    (dict(tol=0.0), "tol must be finite and > 0"),
    (dict(tol=float("inf")), "tol must be finite and > 0"),  # stopped at once with theta = 0
    (dict(y=np.array([0.0, 2.0, 7.0, 1.0])), r"y must be in \{0, 1\}.*\[2.0, 7.0\]"),
    (dict(y=np.array([0.0, 0.5, 1.0, 1.0])), r"y must be in \{0, 1\}"),
    (dict(y=np.array([0.0, np.nan, 1.0, 1.0])), r"y must be in \{0, 1\}"),
])
def test_fit_glm_refuses_invalid_arguments(kwargs, match):
    y = kwargs.pop("y", _Y)
    with pytest.raises(ValueError, match=match):
        glm.fit_glm(_X, y, "logistic", **kwargs)


def test_glm_labels_each_family_allows():
    """Poisson counts are finite and >= 0 (not necessarily integers), linear labels finite reals."""
    with pytest.raises(ValueError, match=r"y must be finite and >= 0 \(Poisson counts\)"):
        glm.fit_glm(_X, np.array([1.0, -1.0, 2.0, 0.0]), "poisson")
    with pytest.raises(ValueError, match="y must be finite"):
        glm.fit_glm(_X, np.array([1.0, np.inf, 2.0, 0.0]), "poisson")
    with pytest.raises(ValueError, match="y must be finite"):
        glm.fit_glm(_X, np.array([1.0, np.nan, 2.0, 0.0]), "linear")
    assert np.isfinite(np.asarray(glm.fit_glm(_X, np.array([0.0, 1.5, 2.0, 4.0]), "poisson", tol=1e-4).theta)).all()
    assert np.isfinite(np.asarray(glm.fit_glm(_X, np.array([-3.0, 1.5, 2.0, 4.0]), "linear", tol=1e-4).theta)).all()


def test_reconstruct_glm_refuses_invalid_l2_and_labels():
    theta = np.array([0.5, 1.0])
    for l2 in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="l2 must be finite and >= 0"):
            glm.reconstruct_glm(theta, _X[:3], _Y[:3], "logistic", l2=l2)
    with pytest.raises(ValueError, match=r"fixed_y must be in \{0, 1\}"):
        glm.reconstruct_glm(theta, _X[:3], np.array([0.0, 3.0, 1.0]), "logistic", l2=0.1)
    with pytest.raises(ValueError, match="fixed_y must be finite and >= 0"):
        glm.reconstruct_glm(theta, _X[:3], np.array([0.0, -3.0, 1.0]), "poisson", l2=0.1)


def test_traced_invalid_arguments_give_nan():
    """Under jit the values are unknown when traced: an invalid l2, tol or label gives NaN, never a plausible fit
    or reconstruction; valid traced values give what eager evaluation gives."""
    fit = jax.jit(lambda y, l2, tol: glm.fit_glm(_X, y, "logistic", l2=l2, tol=tol))
    good = fit(jnp.asarray(_Y), 0.1, 1e-5)
    eager = glm.fit_glm(_X, _Y, "logistic", l2=0.1, tol=1e-5)
    np.testing.assert_allclose(good.theta, eager.theta, rtol=1e-5)  # same computation, jit vs eager rounding
    assert np.isfinite(np.asarray(good.theta)).all() and np.isfinite(float(good.grad_norm))
    for y, l2, tol in [(_Y, -1.0, 1e-5), (_Y, np.nan, 1e-5), (_Y, 0.1, np.inf),
                       (np.array([0.0, 2.0, 1.0, 1.0]), 0.1, 1e-5)]:
        out = fit(jnp.asarray(y), l2, tol)
        assert np.isnan(np.asarray(out.theta)).all() and np.isnan(float(out.grad_norm)), (y, l2, tol)
    rec = jax.jit(lambda l2, fy: glm.reconstruct_glm(jnp.asarray(eager.theta), _X[:3], fy, "logistic", l2=l2))
    x_ok, y_ok = rec(0.1, jnp.asarray(_Y[:3]))
    x_eager, y_eager = glm.reconstruct_glm(eager.theta, _X[:3], _Y[:3], "logistic", l2=0.1)
    np.testing.assert_allclose(x_ok, x_eager, rtol=1e-5)
    assert np.isfinite(np.asarray(x_ok)).all() and np.isfinite(float(y_ok))
    for l2, fy in [(-1.0, _Y[:3]), (np.inf, _Y[:3]), (0.1, np.array([0.0, 3.0, 1.0]))]:
        x_bad, y_bad = rec(l2, jnp.asarray(fy))
        assert np.isnan(np.asarray(x_bad)).all() and np.isnan(float(y_bad)), (l2, fy)


@pytest.mark.parametrize("fmt", ["tensorfloat32", "bfloat16"])
def test_float32_fit_and_recovery_do_not_depend_on_the_matmul_precision(fmt):
    """A GPU's TF32 or a TPU's bfloat16 products at default precision: Newton must still converge and Theorem 1
    still recover the target (at default precision the fit ran to max_iter and recovery was off by 1e-2 to 1e-1)."""
    from recon_jax.testing import emulate_matmul_precision

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 20)).astype(np.float32)
    y = (rng.uniform(size=200) < 1 / (1 + np.exp(-(x @ rng.standard_normal(20) * 0.5)))).astype(np.float32)
    exact = glm.fit_glm(x, y, "logistic", l2=1.0, tol=1e-5)
    exact_x = np.asarray(glm.reconstruct_glm(exact.theta, x[1:], y[1:], "logistic", l2=1.0)[0])
    record = []
    with emulate_matmul_precision(fmt, record=record):
        fit = glm.fit_glm(x, y, "logistic", l2=1.0, tol=1e-5)
        x_hat, y_hat = glm.reconstruct_glm(fit.theta, x[1:], y[1:], "logistic", l2=1.0)
        cands = glm.reconstruct_least_squares_no_intercept(np.linalg.lstsq(x, y, rcond=None)[0].astype(np.float32),
                                                           x[1:], y[1:], y[0])
        grad = glm.glm_gradient(fit.theta, glm.add_intercept(x), y, "logistic", l2=1.0)
    assert record == []  # no product of the attack was rounded
    assert int(fit.num_iters) == int(exact.num_iters) < 100
    assert float(jnp.max(jnp.abs(grad))) < 1e-4
    np.testing.assert_allclose(x_hat, x[0], atol=1e-4)
    np.testing.assert_allclose(x_hat, exact_x, atol=1e-5)
    assert abs(float(y_hat) - float(y[0])) < 1e-3  # the label comes back too
    assert float(np.min(np.max(np.abs(np.asarray(cands) - x[0]), axis=1))) < 1e-2
