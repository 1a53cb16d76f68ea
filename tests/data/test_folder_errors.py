"""Clear errors from the image-folder source (reliability issue, item 5)."""

import numpy as np
import pytest
from PIL import Image

from recon_jax import data


@pytest.fixture()
def folder(tmp_path):
    for i in range(3):
        Image.fromarray(np.full((5, 5), 40 * i, np.uint8)).save(tmp_path / f"img{i}.png")
    return tmp_path


def test_folder_reads_all_images(folder):
    x, y = data.load_image_folder(str(folder), split="all", image_size=4)
    assert x.shape == (3, 4, 4, 1) and (y == -1).all()


def test_corrupt_png_names_the_file(folder):
    (folder / "img1.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ValueError, match=r"img1\.png"):
        data.load_image_folder(str(folder), split="all", image_size=4)


@pytest.mark.parametrize("bad", [-1, 0, 2.5, True])
def test_max_examples_must_be_positive_integer(folder, bad):
    with pytest.raises(ValueError, match="max_examples"):  # -1 used to drop the last image silently
        data.load_image_folder(str(folder), split="all", max_examples=bad)


@pytest.mark.parametrize("bad", [2.5, (4, 2.5), (4,), 0, "8"])
def test_image_size_must_be_positive_ints(folder, bad):
    with pytest.raises(ValueError, match="image_size"):
        data.load_image_folder(str(folder), split="all", image_size=bad)


def test_load_dataset_folder_needs_path():
    with pytest.raises(ValueError, match="path"):
        data.load_dataset("folder")
