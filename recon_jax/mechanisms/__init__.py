"""Noise mechanisms for DP-GD / DP-SGD (Gaussian; von Mises-Fisher in :mod:`recon_jax.mechanisms.vmf`)."""

from recon_jax.mechanisms.base import GaussianMechanism, Mechanism, NoNoise

__all__ = ["Mechanism", "GaussianMechanism", "NoNoise"]
