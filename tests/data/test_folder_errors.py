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


def test_folder_reads_all_images_unlabelled_when_asked(folder):
    x, y = data.load_image_folder(str(folder), split="all", image_size=4, labels=None)
    assert x.shape == (3, 4, 4, 1) and (y == -1).all()


def test_flat_folder_with_class_labels_is_refused(folder):
    with pytest.raises(ValueError, match="one sub-directory per class.*labels=None"):
        data.load_image_folder(str(folder), split="all", image_size=4)


@pytest.mark.parametrize("split", ["train", "test"])
def test_split_without_its_directory_is_refused(folder, split):
    # It used to fall back to the folder itself, so train and test returned the same images.
    with pytest.raises(ValueError, match=f"split='{split}' needs the directory .*{split}"):
        data.load_image_folder(str(folder), split=split, image_size=4)


def test_images_beside_class_directories_are_refused(folder):
    (folder / "cats").mkdir()
    Image.fromarray(np.zeros((5, 5), np.uint8)).save(folder / "cats" / "a.png")
    with pytest.raises(ValueError, match=r"3 images lie directly in .*beside the class sub-directories \['cats'\]"):
        data.load_image_folder(str(folder), split="all", image_size=4)


def test_train_and_test_are_their_own_images(tmp_path):
    for split, value in (("train", 0), ("test", 255)):
        for cls in ("a", "b"):
            (tmp_path / split / cls).mkdir(parents=True)
            Image.fromarray(np.full((5, 5), value, np.uint8)).save(tmp_path / split / cls / "x.png")
    xtr, ytr = data.load_image_folder(str(tmp_path), "train", image_size=4)
    xte, yte = data.load_image_folder(str(tmp_path), "test", image_size=4)
    assert ytr.tolist() == [0, 1] and yte.tolist() == [0, 1]
    assert float(xtr.max()) == 0.0 and float(xte.min()) == 1.0
    with pytest.raises(ValueError, match="train/ and test/"):
        data.load_image_folder(str(tmp_path), "all", image_size=4)


def test_corrupt_png_names_the_file(folder):
    (folder / "img1.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ValueError, match=r"img1\.png"):
        data.load_image_folder(str(folder), split="all", image_size=4, labels=None)


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


def test_a_class_missing_from_one_split_numbers_alike_in_both(tmp_path):
    """train/{cat,dog,fox} and test/{cat,fox}: test's fox was numbered 1 (its own sorted position) where train's is 2,
    so the report measured accuracy against wrong labels."""
    for split, classes in (("train", ("cat", "dog", "fox")), ("test", ("cat", "fox"))):
        for c in classes:
            (tmp_path / split / c).mkdir(parents=True)
            Image.fromarray(np.full((4, 4), 10 * len(c), np.uint8)).save(tmp_path / split / c / f"{c}.png")
    _, y_train = data.load_image_folder(str(tmp_path), "train", image_size=4)
    _, y_test = data.load_image_folder(str(tmp_path), "test", image_size=4)
    assert y_train.tolist() == [0, 1, 2] and y_test.tolist() == [0, 2]  # cat 0, dog 1, fox 2 in both
