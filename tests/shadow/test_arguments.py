"""The argument checks of generate_shadow_models (shadow.arguments) and the grouped output request."""

import jax
import numpy as np
import pytest

from recon_jax import models, shadow, training
from recon_jax.shadow.arguments import OUTPUTS, ShadowOutputs, check_shadow_args

ALG = training.full_batch_gd(learning_rate=0.3, epochs=2, init="random")
FIXED = (np.zeros((6, 3), np.float32), np.arange(6) % 2)
TARGETS = (np.ones((4, 3), np.float32), np.arange(4) % 2)


def test_valid_arguments_are_normalised():
    a = check_shadow_args(ALG, FIXED, TARGETS, outputs=["params", "target_loss"])
    assert a.outputs == ("params", "target_loss") and a.dtype == np.float32
    assert a.fixed_y.dtype == np.int32 and a.target_y.dtype == np.int32
    np.testing.assert_array_equal(a.target_weights, np.ones(4))
    assert a.shuffle_key is None and a.probe is None and a.eval_x is None and a.eval_y is None
    ints = check_shadow_args(ALG, (np.zeros((6, 3), np.int64), FIXED[1]), (np.ones((4, 3), np.int64), TARGETS[1]))
    assert ints.dtype == np.float32 and ints.target_x.dtype == np.float32  # integer inputs train in float32
    # A shuffle key is dropped where the algorithm does not use one, kept where it does.
    assert check_shadow_args(ALG, FIXED, TARGETS, shuffle_key=jax.random.key(0)).shuffle_key is None
    known = training.minibatch_sgd(batch_size=2, epochs=1, shuffle="known", init="random")
    assert check_shadow_args(known, FIXED, TARGETS, shuffle_key=jax.random.key(0)).shuffle_key is not None


@pytest.mark.parametrize("kwargs,match", [
    (dict(outputs=()), r"outputs must be a non-empty subset of \('params'"),
    (dict(outputs=("params", "logits")), "outputs must be a non-empty subset"),
    (dict(outputs=("params", "params")), "outputs has duplicates"),
    (dict(first_layer="fast"), "first_layer must be one of"),
    (dict(chunk_size=0), "chunk_size must be None or an integer >= 1"),
    (dict(chunk_size=2.0), "chunk_size must be None or an integer >= 1"),
    (dict(fixed_set=FIXED[0]), r"fixed_set must be a pair \(x \[n, ...\], y \[n\]\)"),
    (dict(targets=(TARGETS[0],)), "targets must be a pair"),
    (dict(targets=(TARGETS[0], TARGETS[1].astype(float))), "labels must be integers"),
    (dict(fixed_set=(FIXED[0], FIXED[1][:5])), "fixed_set x and y must have the same length"),
    (dict(targets=(TARGETS[0][:0], TARGETS[1][:0])), "targets x and y must have the same length >= 1"),
    (dict(targets=(np.ones((4, 2)), TARGETS[1])), r"targets x must have example shape \(3,\)"),
    (dict(target_weights=[1, 0, 2, 1]), r"target_weights must be a \[4\] array of 0/1"),
    (dict(target_weights=[1, 0]), r"target_weights must be a \[4\] array of 0/1"),
    (dict(init_params={"w": np.zeros(2)}), "init_params must be None when algorithm.init == 'random'"),
    (dict(outputs=("probe_logits",)), "probe_inputs is required"),
    (dict(outputs=("eval_accuracy",)), "eval_set is required"),
    (dict(outputs=ShadowOutputs(("params",)), eval_set=FIXED), "either into outputs"),
])
def test_invalid_arguments_name_the_argument(kwargs, match):
    args = {"fixed_set": FIXED, "targets": TARGETS}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        check_shadow_args(ALG, args.pop("fixed_set"), args.pop("targets"), **args)


def test_fixed_init_needs_init_params_and_known_shuffle_needs_a_key():
    with pytest.raises(ValueError, match="init_params is required"):
        check_shadow_args(training.full_batch_gd(epochs=1), FIXED, TARGETS)  # init="fixed"
    with pytest.raises(ValueError, match="shuffle_key is required"):
        check_shadow_args(training.minibatch_sgd(batch_size=2, epochs=1, shuffle="known", init="random"), FIXED, TARGETS)


def test_grouped_outputs_equal_separate_arguments():
    probe = np.full((2, 3), 0.5, np.float32)
    grouped = check_shadow_args(ALG, FIXED, TARGETS, outputs=ShadowOutputs(OUTPUTS, probe_inputs=probe,
                                                                             eval_set=FIXED))
    loose = check_shadow_args(ALG, FIXED, TARGETS, outputs=OUTPUTS, probe_inputs=probe, eval_set=FIXED)
    for g, s in zip(grouped, loose):
        if isinstance(g, np.ndarray):
            np.testing.assert_array_equal(g, s)
        else:
            assert g == s


def test_generate_shadow_models_accepts_the_grouped_outputs():
    fns = models.from_flax(models.MLP(features=(4, 2)))
    probe = np.full((2, 3), 0.5, np.float32)
    kw = dict(chunk_size=2, progress=False)
    grouped = shadow.generate_shadow_models(fns, ALG, FIXED, TARGETS, jax.random.key(1),
                                            outputs=ShadowOutputs(("params", "probe_logits"), probe_inputs=probe),
                                            **kw)
    loose = shadow.generate_shadow_models(fns, ALG, FIXED, TARGETS, jax.random.key(1),
                                          outputs=("params", "probe_logits"), probe_inputs=probe, **kw)
    for name in ("params", "probe_logits"):
        np.testing.assert_array_equal(grouped[name], loose[name])
    with pytest.raises(ValueError, match="probe_inputs is required"):
        shadow.generate_shadow_models(fns, ALG, FIXED, TARGETS, jax.random.key(1), outputs=("probe_logits",), **kw)
