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
# `RECON_JAX_SMOKE=1` picks tiny sizes (CI); the full-size study is `python -m experiments.balle_mnist`.

# %%
# Install first. From a checkout of the repository: `make install` (or `pip install -e '.[dev]'`). Elsewhere
# (e.g. Colab): build the wheel with `make wheel` in a checkout, upload dist/recon_jax-0.1.0-py3-none-any.whl
# and install it from a cell: `!pip install -q recon_jax-0.1.0-py3-none-any.whl`.
import os

import jax
import matplotlib.pyplot as plt
import numpy as np

from recon_jax import data, models, shadow, training
from recon_jax.attacks import mia, oracle, reconn
from recon_jax.models.reconstructors import reconstructor_mlp

SMOKE = bool(os.environ.get("RECON_JAX_SMOKE"))
fixed_size = 1000  # @param {type:"integer"}
num_shadow = 5000  # @param {type:"integer"}
num_targets = 100  # @param {type:"integer"}
epochs = 100  # @param {type:"integer"}
recon_epochs = 30  # @param {type:"integer"}
if SMOKE:
    fixed_size, num_shadow, num_targets, epochs, recon_epochs = 50, 96, 6, 5, 2

# %% [markdown]
# ## 1. Splits, released model, shadow models

# %%
images, labels = data.load_dataset("mnist", "train")
sp = data.informed_splits(images, labels, fixed_size, num_shadow, num_targets, key_or_seed=0)
fns = models.from_flax(models.balle_mnist_mlp())  # 784-10-10 ELU, 7,960 parameters
alg = training.full_batch_gd(learning_rate=0.2, momentum=0.9, epochs=epochs)
key = jax.random.key(0)
p0 = training.initial_params(fns, jax.random.fold_in(key, 0), sp.fixed_images)  # known to the adversary
fixed = (sp.fixed_images, sp.fixed_labels)
shadows = shadow.generate_shadow_models(fns, alg, fixed, (sp.shadow_images, sp.shadow_labels),
                                        jax.random.fold_in(key, 1), init_params=p0)
released = shadow.generate_shadow_models(fns, alg, fixed, (sp.target_images, sp.target_labels),
                                         jax.random.fold_in(key, 2), init_params=p0)
shadows.params.shape, released.params.shape

# %% [markdown]
# ## 2. Reconstructor network on standardised shadow parameters

# %%
fit = reconn.train_reconstructor(reconstructor_mlp((28, 28, 1), (64, 64) if SMOKE else (1000, 1000)),
                                 shadows.params, sp.shadow_images, jax.random.fold_in(key, 3),
                                 epochs=recon_epochs, batch_size=32 if SMOKE else 128)
recon = np.asarray(reconn.reconstruct(fit, released.params))

# %% [markdown]
# ## 3. Compare with the nearest-neighbour oracle over D- and the shadow pool

# %%
pool = np.concatenate([sp.fixed_images, sp.shadow_images])
orc = oracle.nn_oracle(sp.target_images, pool)
m = oracle.reconstruction_metrics(sp.target_images, recon, orc.nn_mse)
print(f"mean MSE {float(m['mse'].mean()):.4f} | NN oracle {float(orc.nn_mse.mean()):.4f} | "
      f"success rate {float(m['success'].mean()):.2f}")
n = min(6, num_targets)
fig, axes = plt.subplots(3, n, figsize=(1.3 * n, 4.2))
for j in range(n):
    for i, img in enumerate((sp.target_images[j], recon[j], pool[int(orc.nn_index[j])])):
        axes[i, j].imshow(img[..., 0], cmap="gray", vmin=0, vmax=1)
        axes[i, j].axis("off")
axes[0, 0].set_title("target | RecoNN | NN oracle", loc="left", fontsize=8)
plt.show()

# %% [markdown]
# ## 4. Informed membership inference: known vs random initialisation (Fig. 11)

# %%
cand = (sp.target_images[0], sp.target_labels[0])
k = 8 if SMOKE else 100
for name, a, init in (("known init", alg, p0), ("random init", training.full_batch_gd(
        learning_rate=0.2, momentum=0.9, epochs=epochs, init="random"), None)):
    r = mia.informed_mia(fns, a, fixed, cand, jax.random.fold_in(key, 4), num_shadow=k, num_eval=k, init_params=init)
    print(f"{name}: accuracy {r.accuracy:.2f}, AUC {r.auc:.2f}")
