"""keras_vit/data/naflex.py: NaFlex batches against timm's NaFlex eval pipeline
(`ResizeKeepRatioToSequence` -> `Patchify` -> `NaFlexCollator`) and plain NumPy."""


import numpy as np
import pytest

from keras_vit.data.naflex import naflex_batch, naflex_image_size, resize_bilinear
from keras_vit.layers import Patches
from tests.helpers import run_timm_script, to_numpy

SIZES = [(30, 60), (64, 32), (17, 23), (100, 7), (8, 8), (240, 320)]
CASES = [(8, 16), (4, 50), ((4, 8), 30)]  # (patch size, patch budget)

# torch (and timm) imported first in their own process: torch after TensorFlow can crash one.
_TIMM_SCRIPT = """
import sys
import numpy as np
from tests.weights.references import import_timm
import torch
timm = import_timm()
from timm.data.naflex_dataset import NaFlexCollator
from timm.data.naflex_transforms import Patchify, ResizeKeepRatioToSequence
source, target = sys.argv[1], sys.argv[2]
out = {}
with np.load(source) as data:
    images = [data[f"image_{i}"] for i in range(int(data["count"]))]
    for k, (ph, pw, budget) in enumerate(data["cases"].tolist()):
        resize = ResizeKeepRatioToSequence(patch_size=(ph, pw), max_sequence_len=budget,
                                           interpolation="bilinear")
        items = []
        for image in images:
            resized = resize(torch.tensor(image.transpose(2, 0, 1)))
            out[f"size_{k}_{len(items)}"] = np.array(resized.shape[1:])
            items.append((Patchify((ph, pw))(resized), 0))
        batch, _ = NaFlexCollator(budget)(items)
        for key in ("patches", "patch_coord", "patch_valid"):
            out[f"{key}_{k}"] = batch[key].numpy()
np.savez(target, **out)
"""


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, size=(h, w, 3)).astype("float32") for h, w in SIZES]


@pytest.fixture(scope="module")
def timm_batches(images, tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("naflex")
    source, target = str(folder / "in.npz"), str(folder / "out.npz")
    cases = [(*((p, p) if isinstance(p, int) else p), budget) for p, budget in CASES]
    arrays = {f"image_{i}": image for i, image in enumerate(images)}
    np.savez(source, count=len(images), cases=np.array(cases), **arrays)
    return run_timm_script(_TIMM_SCRIPT, source, target)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_timm_naflex_pipeline(images, timm_batches, case):
    patch, budget = CASES[case]
    for i, image in enumerate(images):
        expected = tuple(timm_batches[f"size_{case}_{i}"].tolist())
        assert naflex_image_size(image.shape[:2], patch, budget) == expected, SIZES[i]
    batch = naflex_batch(images, patch, budget)
    np.testing.assert_array_equal(batch["patch_coord"], timm_batches[f"patch_coord_{case}"])
    np.testing.assert_array_equal(batch["patch_valid"], timm_batches[f"patch_valid_{case}"])
    # torchvision resizes in float32, we in float64: within 1e-5 on images in [-1, 1].
    np.testing.assert_allclose(
        batch["patches"], timm_batches[f"patches_{case}"], rtol=0, atol=1e-5
    )
    assert batch["patches"].dtype == np.float32 and batch["patch_coord"].dtype == np.int64


def test_keeps_aspect_ratio_within_the_budget():
    for h, w in [(480, 640), (1000, 10), (10, 1000), (7, 7), (333, 777)]:
        for budget in (1, 16, 100, 576):
            height, width = naflex_image_size((h, w), 16, budget)
            assert height % 16 == 0 and width % 16 == 0
            assert (height // 16) * (width // 16) <= budget
            if min(h, w) * 10 >= max(h, w) and budget >= 100:  # not clamped to one patch
                assert abs(np.log((height / width) / (h / w))) < 0.35


def test_valid_patches_are_the_resized_image_in_patches_order():
    """Independent of timm: the valid rows are `Patches` of the NumPy-resized image."""
    rng = np.random.default_rng(3)
    image = rng.uniform(-1, 1, size=(45, 90, 2)).astype("float32")
    batch = naflex_batch([image], (4, 8), 40)
    height, width = naflex_image_size((45, 90), (4, 8), 40)
    resized = resize_bilinear(image, (height, width))
    expected = to_numpy(Patches((4, 8))(resized[None]))[0]
    n = len(expected)
    np.testing.assert_allclose(batch["patches"][0, :n], expected, atol=1e-7)
    assert batch["patch_valid"][0].sum() == n and not batch["patches"][0, n:].any()
    gw = width // 8
    np.testing.assert_array_equal(batch["patch_coord"][0, :n, 0], np.arange(n) // gw)
    np.testing.assert_array_equal(batch["patch_coord"][0, :n, 1], np.arange(n) % gw)


@pytest.mark.parametrize(
    "images,kwargs,match",
    [
        ([], {}, "at least one image"),
        ([np.zeros((8, 8, 3)), np.zeros((8, 8, 1))], {}, "one channel count"),
        ([np.zeros((8, 8))], {}, "one channel count"),
        ([np.zeros((8, 8, 3))], {"max_patches": 0}, "max_patches must be a positive"),
        ([np.zeros((8, 8, 3))], {"patch_size": (4, 0)}, "patch_size must be positive"),
    ],
)
def test_bad_input(images, kwargs, match):
    with pytest.raises(ValueError, match=match):
        naflex_batch(images, **{"patch_size": 4, "max_patches": 8, **kwargs})
