# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Reconstructing training data with informed adversaries (Balle et al., S&P 2022)
#
# The adversary knows every training point but one (the fixed set D-), the training algorithm and the initial
# parameters. It trains one *shadow model* per candidate image on D- plus that image, learns a *reconstructor
# network* from (shadow parameters -> image), and applies it to the released model. Success means the
# reconstruction is closer (in MSE) to the target than the nearest image the adversary already had (the NN
# oracle). The same adversary also wins the informed membership game when it knows the initialisation.
# `RECON_JAX_SMOKE=1` picks tiny sizes (CI); the experiment is `python -m experiments.balle_mnist` (its default
# variant: 10,000 shadow models), and the whole Table II column `--config=experiments/configs/balle_mnist.py:table2`
# (CPU) or `:gpu` (the paper's 59,000 per row).
# Everything below runs the library pipeline `recon_jax.attacks.informed`, the same code as the experiments.

# %%
# Install recon_jax where it is missing (Colab: from the repository; set REPO to your copy or fork, a branch
# with @name). In a checkout with the package installed (`make install`, CI) this cell does nothing.
REPO = "https://github.com/YOUR-ORG/recon_jax"  # @param {type:"string"}
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("recon_jax") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"recon-jax @ git+{REPO}"], check=True)

# %%
import os

import jax
import matplotlib.pyplot as plt
import numpy as np

from recon_jax import data, models, training
from recon_jax.attacks import informed, mia

SMOKE = bool(os.environ.get("RECON_JAX_SMOKE"))
fixed_size = 1000  # @param {type:"integer"}
num_shadow = 5000  # @param {type:"integer"}
num_targets = 100  # @param {type:"integer"}
epochs = 100  # @param {type:"integer"}
recon_epochs = 30  # @param {type:"integer"}
if SMOKE:
    fixed_size, num_shadow, num_targets, epochs, recon_epochs = 50, 96, 6, 5, 2

# %% [markdown]
# ## 1. Splits: MNIST train + test, evaluation targets apart, everything else in the adversary's pool
#
# The paper's layout (Sec. V-A): 1,000 evaluation targets; the other 69,000 records are what the adversary
# knows. The fixed set D- and the shadow targets come from that pool; the NN oracle searches all of it.

# %%
images, labels = data.load_dataset("mnist", "train+test")
sp = data.pool_splits(images, labels, fixed_size=fixed_size, num_shadow=num_shadow, num_targets=num_targets,
                      key_or_seed=0)
len(sp.fixed_images), len(sp.shadow_images), len(sp.target_images), len(sp.pool_images)

# %% [markdown]
# ## 2. The pipeline: shadow and released models, reconstructor, NN oracle, metrics
#
# One released model per target and one shadow model per shadow target, each trained on D- plus its own point
# from the known initialisation; a reconstructor MLP learns shadow parameters -> image (the last 10% of the
# shadow models are held out for its validation MSE); success per target = reconstruction closer than the
# target's nearest pool record.

# %%
fns = models.from_flax(models.balle_mnist_mlp())  # 784-10-10 ELU, 7,960 parameters
alg = training.full_batch_gd(learning_rate=0.2, momentum=0.9, epochs=epochs)
key = jax.random.key(0)
p0 = training.initial_params(fns, jax.random.fold_in(key, 0), sp.fixed_images)  # known to the adversary
spec = informed.ReconstructorSpec(hidden=(64, 64) if SMOKE else (1000, 1000), epochs=recon_epochs,
                                  batch_size=32 if SMOKE else 128, validation_size=num_shadow // 10)
model_sets = informed.train_model_sets(fns, alg, sp, key, init_params=p0,
                                       sizes=informed.ModelSetSizes(probe_size=20 if SMOKE else 200))
orc = informed.oracle_for(sp)  # nearest pool record of every target
result = informed.informed_attack(sp, model_sets, jax.random.fold_in(key, 3), oracle=orc, reconstructor=spec)
print(f"mean MSE {result.mean_mse:.4f} | NN oracle {result.mean_oracle_mse:.4f} | "
      f"success rate {float(result.success.mean()):.2f} | Table II success: {result.row_success}")

# %%
n = min(6, num_targets)
fig, axes = plt.subplots(3, n, figsize=(1.3 * n, 4.2))
for j in range(n):
    for i, img in enumerate((sp.target_images[j], result.reconstructions[j], sp.pool_images[int(orc.nn_index[j])])):
        axes[i, j].imshow(img[..., 0], cmap="gray", vmin=0, vmax=1)
        axes[i, j].axis("off")
axes[0, 0].set_title("target | RecoNN | NN oracle", loc="left", fontsize=8)
plt.show()

# %% [markdown]
# ## 3. Black-box access: the same models, probe logits as features (Sec. VI-C)
#
# The models above also recorded their logits on probe images; only the reconstructor is retrained.
# (`informed.run_informed_pipeline` does sections 2 and 3's steps for one setting in one call.)

# %%
logits = informed.informed_attack(sp, model_sets, jax.random.fold_in(key, 4), oracle=orc, features="logits",
                                  reconstructor=spec, name="logits")
print(f"logits: mean MSE {logits.mean_mse:.4f}, success rate {float(logits.success.mean()):.2f}")

# %% [markdown]
# ## 4. Informed membership inference: known vs random initialisation (Fig. 11)

# %%
fixed = (sp.fixed_images, sp.fixed_labels)
cand = (sp.target_images[0], sp.target_labels[0])
k = 8 if SMOKE else 100
for name, a, init in (("known init", alg, p0), ("random init", training.full_batch_gd(
        learning_rate=0.2, momentum=0.9, epochs=epochs, init="random"), None)):
    r = mia.informed_mia(fns, a, fixed, cand, jax.random.fold_in(key, 5), num_shadow=k, num_eval=k, init_params=init)
    print(f"{name}: accuracy {r.accuracy:.2f}, AUC {r.auc:.2f}")

# %% [markdown]
# ## 5. The training step, by hand
#
# Every model above comes from `training.train`, which scans one public training step over epochs and batches.
# The step is `step(state, batch, key) -> (state, metrics)`, pure and jittable: here it trains the first target's
# released model in a Python loop (full batch: one step per epoch; `key` is the step's mechanism-noise key, unused
# without noise) and lands on the model `train` returns.

# %%
hand_key = jax.random.fold_in(key, 6)  # a key of its own: `key` is the model sets' base
step = jax.jit(training.make_train_step(fns, alg))
batch = training.Batch(sp.fixed_images, sp.fixed_labels, target_x=sp.target_images[0], target_y=sp.target_labels[0])
state = training.TrainState.create(p0, alg)
for t in range(epochs):
    state, step_metrics = step(state, batch, training.noise_key(hand_key, t))
released = training.train(fns, alg, (sp.fixed_images, sp.fixed_labels), (sp.target_images[0], sp.target_labels[0]),
                          key=hand_key, init_params=p0)
gap = np.max(np.abs(np.asarray(models.ravel(state.params)[0]) - np.asarray(models.ravel(released.params)[0])))
print(f"{int(state.step)} steps by hand: last loss {float(step_metrics['loss']):.4f} "
      f"(train: {float(released.losses[-1]):.4f}); max |params by hand - train| = {gap:.1g}")
