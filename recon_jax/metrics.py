"""Reconstruction metrics (being written)."""
