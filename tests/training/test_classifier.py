"""recon_jax.training.train_classifier: learns separable data, validates its settings, Adam = AdamW(0)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from recon_jax.models import MLP, tygert
from recon_jax.training import train_classifier


def test_train_classifier_learns_tygert_feature_net():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=256)
    x = rng.normal(size=(256, 28, 28, 1)).astype(np.float32) * 0.3
    x[:, :8, :8, 0] += 2.0 * (2.0 * y - 1.0)[:, None, None]  # strong class signal in one corner
    model = tygert.MNISTFeatureNet(width=32, num_classes=2)
    losses = []
    params = train_classifier(model, jnp.asarray(x), jnp.asarray(y), jax.random.key(0), epochs=3,
                              batch_size=32, weight_decay=1e-2, epoch_callback=lambda e, p, loss: losses.append(float(loss)))
    assert losses[-1] < losses[0] * 0.5, losses
    acc = float(jnp.mean(jnp.argmax(model.apply(params, jnp.asarray(x)), -1) == jnp.asarray(y)))
    assert acc > 0.95


def test_train_classifier_learns_mlp():
    x = jax.random.normal(jax.random.key(1), (128, 6))
    y = (x[:, 1] + x[:, 2] > 0).astype(jnp.int32)
    v = train_classifier(MLP(features=(16, 2)), x, y, jax.random.key(0), epochs=20, batch_size=32, learning_rate=1e-2)
    assert float(jnp.mean(MLP(features=(16, 2)).apply(v, x).argmax(-1) == y)) > 0.95


@pytest.mark.parametrize("kwargs, match", [
    (dict(epochs=-1), "epochs"), (dict(batch_size=0), "batch_size"), (dict(batch_size=65), "batch_size"),
    (dict(learning_rate=0.0), "learning_rate"), (dict(weight_decay=-1e-3), "weight_decay"),
])
def test_train_classifier_rejects_bad_settings(kwargs, match):
    x, y = jnp.zeros((64, 4)), jnp.zeros((64,), jnp.int32)
    with pytest.raises(ValueError, match=match):
        train_classifier(MLP(features=(2,)), x, y, jax.random.key(0), **kwargs)
    with pytest.raises(ValueError, match="same length"):
        train_classifier(MLP(features=(2,)), x, y[:10], jax.random.key(0))


def test_train_classifier_is_adam_without_weight_decay():
    """An independent loop with optax.adam on optax's own cross-entropy gives the same parameters."""
    x = jax.random.normal(jax.random.key(1), (32, 5)); y = (x[:, 0] > 0).astype(jnp.int32)
    model = MLP(features=(7, 2))
    got = train_classifier(model, x, y, jax.random.key(3), epochs=2, batch_size=8, learning_rate=1e-2)
    init_key, shuffle_key = jax.random.split(jax.random.key(3))
    v = model.init(init_key, x[:1]); tx = optax.adam(1e-2); s = tx.init(v)
    loss = lambda v, xb, yb: optax.softmax_cross_entropy_with_integer_labels(model.apply(v, xb), yb).mean()
    for e in range(2):
        perm = np.asarray(jax.random.permutation(jax.random.fold_in(shuffle_key, e), 32)).reshape(4, 8)
        for idx in perm:
            g = jax.grad(loss)(v, x[idx], y[idx]); u, s = tx.update(g, s, v); v = optax.apply_updates(v, u)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(v)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
