"""Host-side data: the embedded MNIST, TFDS and image-folder sources, synthetic blobs, informed splits.

>>> from recon_jax import data
>>> images, labels = data.load_dataset("mnist", "test")
>>> images.shape, int(labels[0])
((10000, 28, 28, 1), 7)
"""

from recon_jax.data.embedded import DataIntegrityError, load_embedded_mnist, parse_idx, verify_checksums
from recon_jax.data.sources import (
    DATASETS,
    TFDS_DATASETS,
    DatasetNotAvailableError,
    load_dataset,
    load_image_folder,
    load_tfds,
    synthetic_blobs,
)
from recon_jax.data.splits import InformedSplits, informed_splits, pool_splits

__all__ = [
    "DATASETS",
    "TFDS_DATASETS",
    "DataIntegrityError",
    "DatasetNotAvailableError",
    "InformedSplits",
    "informed_splits",
    "pool_splits",
    "load_dataset",
    "load_embedded_mnist",
    "load_image_folder",
    "load_tfds",
    "parse_idx",
    "synthetic_blobs",
    "verify_checksums",
]
