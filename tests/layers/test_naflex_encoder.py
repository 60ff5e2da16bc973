"""keras_vit/layers/naflex_encoder.py: NaFlex patch sequences -> tokens, against NumPy."""

import numpy as np
import pytest

from keras_vit.data import naflex_batch
from keras_vit.layers import NaFlexPatchEncoder, PatchEncoder
from keras_vit.layers.bicubic import resize_bicubic
from tests.helpers import check_config_complete, to_numpy


def _batch():
    rng = np.random.default_rng(0)
    return naflex_batch([rng.normal(size=(16, 40, 3)), rng.normal(size=(32, 16, 3))], 8, 12)


def _randomized(layer, batch):
    layer(batch["patches"], batch["patch_coord"], batch["patch_valid"])
    rng = np.random.default_rng(1)
    for w in layer.weights:
        w.assign(rng.normal(0, 0.3, tuple(w.shape)).astype("float32"))
    return layer


def test_matches_numpy():
    """Projection by the (ph, pw, C, D) kernel, each image's table resized to its own grid
    (antialiased bicubic, NumPy), class and register tokens first."""
    batch = _batch()
    layer = _randomized(
        NaFlexPatchEncoder(
            8, 8, position_embedding_grid=(3, 4), num_register_tokens=2, class_token=True
        ),
        batch,
    )
    got = to_numpy(layer(batch["patches"], batch["patch_coord"], batch["patch_valid"]))
    kernel = to_numpy(layer.kernel).reshape(-1, 8)
    table = to_numpy(layer.position_embeddings).reshape(3, 4, 8)
    prefix = np.concatenate(
        [to_numpy(layer.class_embedding), to_numpy(layer.register_embeddings)], 1
    )
    for b in range(2):
        n = int(batch["patch_valid"][b].sum())
        h, w = batch["patch_coord"][b, :n].max(0) + 1
        expected = batch["patches"][b, :n] @ kernel + to_numpy(layer.bias)
        expected = expected + resize_bicubic(table, (h, w)).reshape(h * w, 8)
        np.testing.assert_allclose(got[b, :3], prefix[0], atol=1e-6)
        np.testing.assert_allclose(got[b, 3 : 3 + n], expected, rtol=1e-5, atol=1e-5)
    assert got.shape == (2, 15, 8)


def test_same_weights_as_patch_encoder():
    """The variables of a PatchEncoder without prefix position rows, in the same order."""
    plain = PatchEncoder(
        8, 8, class_token=True, num_register_tokens=1, prefix_position_embedding=False
    )
    plain.build((None, 24, 32, 3))
    naflex = NaFlexPatchEncoder(
        8, 8, position_embedding_grid=(3, 4), class_token=True, num_register_tokens=1
    )
    naflex.build((None, None, 192))
    assert [(w.name, tuple(w.shape)) for w in naflex.weights] == [
        (w.name, tuple(w.shape)) for w in plain.weights
    ]


def test_config_and_factorized():
    layer = NaFlexPatchEncoder(
        8,
        (4, 8),
        position_embedding_grid=5,
        position_embedding="factorized",
        interpolation="bilinear",
        antialias=False,
        align_corners=True,
        aspect_preserving=True,
        dropout_rate=0.1,
        name="enc",
    )
    check_config_complete(layer)
    layer.build((None, None, 4 * 8 * 3))
    assert [tuple(w.shape) for w in layer.weights][-2:] == [(1, 5, 8), (1, 5, 8)]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(position_embedding="sincos2d"), "position_embedding must be one of"),
        (dict(interpolation="nearest"), "interpolation must be one of"),
        (dict(align_corners=True), "align_corners=True needs antialias=False"),
        (dict(num_register_tokens=-1), "num_register_tokens"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NaFlexPatchEncoder(8, 8, position_embedding_grid=4, **kwargs)


def test_bad_patch_width():
    with pytest.raises(ValueError, match=r"expects patches \(batch, tokens, 8 \* 8 \* channels\)"):
        NaFlexPatchEncoder(8, 8, position_embedding_grid=4).build((None, None, 100))
