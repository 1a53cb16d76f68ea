"""Dataset sources behind one call, ``load_dataset(name, split, ...)``.

All sources return host NumPy arrays: images float32 in [0, 1], NHWC, and integer labels (int32; -1 where a
source has no labels).

| name | what |
|---|---|
| ``"mnist"`` | the embedded MNIST (offline, the default) |
| ``"tfds:mnist"``, ``"tfds:fashion_mnist"``, ``"tfds:cifar10"``, ``"tfds:cifar100"`` | TensorFlow Datasets, from a prepared ``data_dir`` |
| ``"folder"`` | a directory of PNG/JPEG images (``path=``): ``train/`` and ``test/``, one sub-directory per class |
| ``"synthetic"`` | seeded Gaussian blobs of any image shape |
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from recon_jax.data.embedded import load_embedded_mnist

__all__ = [
    "DATASETS",
    "TFDS_DATASETS",
    "DatasetNotAvailableError",
    "load_dataset",
    "load_tfds",
    "load_image_folder",
    "synthetic_blobs",
]

#: The TFDS datasets :func:`load_dataset` reads (as ``"tfds:<name>"``, from a prepared ``data_dir``).
TFDS_DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")
#: Every dataset name :func:`load_dataset` takes.
DATASETS = ("mnist", "synthetic", "folder") + tuple(f"tfds:{n}" for n in TFDS_DATASETS)
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


class DatasetNotAvailableError(FileNotFoundError):
    """A dataset exists but is not prepared on this machine (no network downloads are attempted)."""


def load_dataset(name: str = "mnist", split: str = "train", **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Loads a dataset split as ``(images, labels)``.

    Args:
      name: one of ``DATASETS`` (see the module docstring).
      split: ``"train"``, ``"test"`` or ``"train+test"`` (both, concatenated in that order: MNIST's 70,000
        records for Balle et al.'s layout); TFDS also accepts its slicing syntax, e.g. ``"train[:10%]"``.
      **kwargs: source options: ``data_dir`` (TFDS); ``path``, ``image_size``, ``channels`` (folder);
        ``num_examples``, ``shape``, ``num_classes``, ``seed``, ``spread`` (synthetic).

    Returns:
      images ``[N, H, W, C]`` float32 in [0, 1] and labels ``[N]`` int32.

    Raises:
      ValueError: unknown name or split, or bad options.
      DatasetNotAvailableError: a TFDS dataset is not prepared in ``data_dir``.

    >>> images, labels = load_dataset("synthetic", "train", num_examples=8, shape=(4, 4, 1), seed=0)
    >>> images.shape, labels.shape, images.dtype
    ((8, 4, 4, 1), (8,), dtype('float32'))
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise ValueError(f"name must be one of {list(DATASETS)}, got {name!r}")
    if split == "train+test":
        parts = [load_dataset(name, s, **kwargs) for s in ("train", "test")]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if name == "mnist":
        _no_extra(name, kwargs)
        return load_embedded_mnist(split)
    if name.startswith("tfds:"):
        return load_tfds(name.split(":", 1)[1], split, **kwargs)
    if name == "folder":
        if "path" not in kwargs:
            raise ValueError("load_dataset('folder') needs path=<directory of images>")
        return load_image_folder(split=split, **kwargs)
    return synthetic_blobs(split=split, **kwargs)


def _no_extra(name, kwargs):
    if kwargs:
        raise ValueError(f"dataset {name!r} takes no options, got {sorted(kwargs)}")


def _check_split(split: str, allowed: Sequence[str] = ("train", "test")) -> None:
    if split not in allowed:
        raise ValueError(f"split must be one of {list(allowed)}, got {split!r}")


def _default_tfds_dir() -> str:
    return os.environ.get("TFDS_DATA_DIR", os.path.join(os.path.expanduser("~"), "tensorflow_datasets"))


def load_tfds(
    name: str, split: str = "train", data_dir: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Loads a prepared TFDS dataset without downloading anything.

    Reads through ``builder.as_data_source`` (array_record files, no TensorFlow needed) and falls back to
    ``as_dataset`` (needs TensorFlow) for datasets prepared as TFRecords.

    Raises:
      ValueError: unknown TFDS name or bad split string.
      DatasetNotAvailableError: not prepared in ``data_dir`` (message says where it looked and how to prepare).
    """
    if name not in TFDS_DATASETS:
        raise ValueError(f"TFDS name must be one of {list(TFDS_DATASETS)}, got {name!r}")
    if not isinstance(split, str) or not split or not (split.startswith("train") or split.startswith("test")):
        raise ValueError(f"split must be 'train' or 'test' (TFDS slicing allowed, e.g. 'train[:10%]'), got {split!r}")
    import tensorflow_datasets as tfds

    data_dir = data_dir or _default_tfds_dir()
    builder = tfds.builder(name, data_dir=data_dir)
    try:  # array_record / mocked data: random access, no TensorFlow, never downloads.
        source = builder.as_data_source(split=split)
    except (NotImplementedError, ValueError, AssertionError, FileNotFoundError) as e:
        if not builder.is_prepared():
            raise DatasetNotAvailableError(
                f"TFDS dataset {name!r} is not prepared in {builder.data_dir!r} (data_dir={data_dir!r}) and this "
                f"library never downloads at run time. Prepare it on a machine with internet access, e.g. "
                f"`tfds build {name} --data_dir=DIR --file_format=array_record`, copy DIR here and pass "
                f"data_dir=DIR (or set TFDS_DATA_DIR)."
            ) from e
        source = None
    if source is not None:
        records = [source[i] for i in range(len(source))]
        if not records:
            raise ValueError(f"TFDS split {split!r} of {name!r} is empty")
        images = np.stack([np.asarray(r["image"]) for r in records])
        labels = np.asarray([int(r["label"]) for r in records], dtype=np.int32)
    else:  # prepared as TFRecords: needs TensorFlow.
        batch = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
        images, labels = np.asarray(batch["image"]), np.asarray(batch["label"], dtype=np.int32)
    return _to_float_images(images), labels


def _to_float_images(images: np.ndarray) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.dtype == np.uint8:
        return images.astype(np.float32) / 255.0
    return np.clip(images.astype(np.float32), 0.0, 1.0)


def _class_names(path: str) -> list[str]:
    """The classes of a train/test folder: the sub-directories of ``path/train`` and ``path/test`` together, sorted,
    so that a class numbers the same in both splits when one split lacks a class."""
    names = set()
    for split in ("train", "test"):
        d = os.path.join(path, split)
        if os.path.isdir(d):
            names |= {c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c))}
    return sorted(names)


def load_image_folder(
    path: str,
    split: str = "train",
    image_size: int | tuple[int, int] = 64,
    channels: int = 1,
    labels: str | dict[str, int] | None = "subdirs",
    max_examples: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Loads a directory of PNG/JPEG images (e.g. NIH Chest X-ray, or your own data), resized.

    Layout: ``split="train"`` / ``"test"`` read ``path/train`` / ``path/test`` (an error if it is missing: a folder
    without them would give both splits the same images); ``split="all"`` reads ``path`` itself. Labels:
    ``"subdirs"`` (one sub-directory per class, classes numbered in sorted name order, over ``train/`` and ``test/``
    together so that both splits number a class alike; an error if there is none,
    or if images lie beside them), a dict mapping file name -> label (images directly in the folder), or ``None``
    (unlabelled: the images directly in the folder, all labelled -1). Files are read in sorted order.

    >>> import os, tempfile, numpy as np
    >>> from PIL import Image
    >>> d = tempfile.mkdtemp()
    >>> for split, cls in [("train", "cat"), ("train", "dog"), ("test", "cat")]:
    ...     os.makedirs(os.path.join(d, split, cls))
    ...     Image.fromarray(np.zeros((4, 4), np.uint8)).save(os.path.join(d, split, cls, "a.png"))
    >>> x, y = load_image_folder(d, "train", image_size=2)
    >>> x.shape, y.tolist()
    ((2, 2, 2, 1), [0, 1])

    Args:
      path: the folder.
      split: ``"train"``, ``"test"`` or ``"all"``.
      image_size: output ``H`` (square) or ``(H, W)``.
      channels: 1 (grayscale) or 3 (RGB).
      labels: label policy, see above.
      max_examples: keep only the first this many files (sorted order).

    Raises:
      ValueError: missing folder, no images, or bad options.
    """
    from PIL import Image

    _check_split(split, ("train", "test", "all"))
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    size = (image_size,) * 2 if isinstance(image_size, (int, np.integer)) else image_size
    if not (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in size)):
        raise ValueError(f"image_size must be a positive int or a pair (H, W) of positive ints, got {image_size!r}")
    size = (int(size[0]), int(size[1]))
    if max_examples is not None and (isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer))
                                     or max_examples < 1):
        raise ValueError(f"max_examples must be None or an integer >= 1, got {max_examples!r}")
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        raise ValueError(f"path must be an existing directory of images, got {path!r}")
    if not (labels in ("subdirs", None) or isinstance(labels, dict)):
        raise ValueError(f"labels must be 'subdirs', a dict or None, got {labels!r}")
    layout = ("lay it out as path/train/<class>/*.png and path/test/<class>/*.png (one sub-directory per class), "
              "or read a single folder with split='all'")
    root = path if split == "all" else os.path.join(path, split)
    if not os.path.isdir(root):
        raise ValueError(f"split={split!r} needs the directory {root!r}, which does not exist: {layout}")
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    loose = [f for f in sorted(os.listdir(root)) if f.lower().endswith(_IMAGE_SUFFIXES)]
    files: list[tuple[str, int]] = []
    if labels == "subdirs":
        if split == "all" and {"train", "test"} <= set(classes):
            raise ValueError(f"{root!r} holds train/ and test/: load split='train' and split='test' (their "
                             "sub-directories are the classes), not split='all'")
        if not classes:
            raise ValueError(f"labels='subdirs' needs one sub-directory per class in {root!r}, and it has none "
                             f"({len(loose)} images lie directly in it): {layout}; or pass labels=None to load "
                             "them unlabelled (label -1)")
        if loose:
            raise ValueError(f"{len(loose)} images lie directly in {root!r} beside the class sub-directories "
                             f"{classes}: move them into a class directory, or pass labels=None (only those images, "
                             "unlabelled) or a dict of labels")
        numbering = {c: i for i, c in enumerate(_class_names(path) if split != "all" else classes)}
        for cname in classes:
            for fname in sorted(os.listdir(os.path.join(root, cname))):
                if fname.lower().endswith(_IMAGE_SUFFIXES):
                    files.append((os.path.join(root, cname, fname), numbering[cname]))
    else:
        files = [(os.path.join(root, f), labels.get(f, -1) if isinstance(labels, dict) else -1) for f in loose]
    if max_examples is not None:
        files = files[: int(max_examples)]
    if not files:
        raise ValueError(f"no PNG/JPEG images found under {root!r}")
    mode = "L" if channels == 1 else "RGB"
    out = np.empty((len(files), size[0], size[1], channels), np.float32)
    for i, (fpath, _) in enumerate(files):
        try:
            with Image.open(fpath) as im:
                im = im.convert(mode).resize((size[1], size[0]), Image.BILINEAR)
                arr = np.asarray(im, dtype=np.float32) / 255.0
        except (OSError, ValueError, SyntaxError) as e:  # PIL: UnidentifiedImageError (an OSError), truncated data
            raise ValueError(f"cannot read image {fpath!r}: {e}") from e
        out[i] = arr.reshape(size[0], size[1], channels)
    return out, np.asarray([lab for _, lab in files], dtype=np.int32)


def synthetic_blobs(
    split: str = "train",
    num_examples: int = 1000,
    shape: Sequence[int] = (28, 28, 1),
    num_classes: int = 10,
    seed: int = 0,
    spread: float = 0.15,
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded Gaussian blobs: one random centre image per class, plus Gaussian noise, clipped to [0, 1].

    The class centres depend only on ``seed``; the examples of ``"train"`` and ``"test"`` use different
    derived streams, so the two splits are independent draws from the same distribution.
    """
    _check_split(split)
    shape = tuple(int(s) for s in shape)
    if num_examples < 1:
        raise ValueError(f"num_examples must be >= 1, got {num_examples}")
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"shape must be (H, W, C) with positive entries, got {shape}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if not spread >= 0:
        raise ValueError(f"spread must be >= 0, got {spread}")
    centres = np.random.default_rng([seed, 0]).uniform(0.0, 1.0, (num_classes, *shape))
    rng = np.random.default_rng([seed, 1 if split == "train" else 2])
    labels = rng.integers(0, num_classes, num_examples)
    images = centres[labels] + spread * rng.standard_normal((num_examples, *shape))
    return np.clip(images, 0.0, 1.0).astype(np.float32), labels.astype(np.int32)
