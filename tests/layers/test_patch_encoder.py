import keras
import numpy as np
import pytest
import scipy.ndimage

from keras_vit.layers import PatchEncoder, Patches
from keras_vit.layers.bicubic import resize_bicubic
from keras_vit.layers.position_embedding import (
    resample_position_embedding,
    sincos_2d_position_embedding,
)
from tests.helpers import roundtrip_model, to_numpy
from tests.layer_harness import run_layer_test


def _images(b=2, h=16, w=24, c=3):
    return np.random.rand(b, h, w, c).astype("float32")


@pytest.mark.parametrize(
    "kwargs,num_weights,extra_params",
    [
        (dict(class_token=True), 4, 7 * 32 + 32),
        (dict(position_embedding="sincos2d", dropout_rate=0.1, kernel_initializer="zeros"), 3, 32),
        (dict(class_token=False, position_embedding=None, patch_size=(8, 4)), 2, 0),
        # cls, dist, 2 registers: 4 prefix rows in the table (1 + 1 + 2 + 6 + 4) * 32.
        (dict(distillation_token=True, num_register_tokens=2), 6, 14 * 32),
        # Registers, no class token, a table of the patches only (timm no_embed_class).
        (
            dict(class_token=False, num_register_tokens=3, prefix_position_embedding=False),
            4,
            (3 + 6) * 32,
        ),
        # Any image size: a (2, 3) table resampled at call time.
        (dict(dynamic_image_size=True, num_register_tokens=1), 5, (2 + 2 + 6) * 32),
    ],
)
def test_layer(kwargs, num_weights, extra_params):
    kwargs = {"hidden_dim": 32, "patch_size": 8, **kwargs}
    ph, pw = (8, 8) if kwargs["patch_size"] == 8 else kwargs["patch_size"]
    prefix = int(kwargs.get("class_token", True)) + int(kwargs.get("distillation_token", False))
    tokens = (16 // ph) * (24 // pw) + prefix + kwargs.get("num_register_tokens", 0)
    layer = run_layer_test(
        PatchEncoder,
        kwargs,
        input_shape=(2, 16, 24, 3),
        expected_output_shape=(2, tokens, 32),
        expected_num_trainable_weights=num_weights,
        expected_num_params=ph * pw * 3 * 32 + 32 + extra_params,
    )
    assert layer.grid_size == (16 // ph, 24 // pw)


def test_projection_equals_patches_times_kernel():
    """The strided convolution is the same function as Patches followed by a dense layer."""
    layer = PatchEncoder(16, (4, 2), class_token=False, position_embedding=None)
    images = _images(h=8, w=6)
    layer.build(images.shape)
    layer.bias.assign(np.random.rand(16).astype("float32"))
    kernel = to_numpy(layer.kernel).reshape(-1, 16)
    expected = to_numpy(Patches((4, 2))(images)) @ kernel + to_numpy(layer.bias)
    np.testing.assert_allclose(to_numpy(layer(images)), expected, rtol=1e-5, atol=1e-5)


def test_numpy_reference_with_class_token_and_position():
    layer = PatchEncoder(8, 4)
    images = _images(h=8, w=8)
    layer.build(images.shape)
    for w in layer.weights:
        w.assign(np.random.rand(*w.shape).astype("float32"))
    n = to_numpy
    patches = n(Patches(4)(images)) @ n(layer.kernel).reshape(-1, 8) + n(layer.bias)
    cls = np.broadcast_to(n(layer.class_embedding), (2, 1, 8))
    expected = np.concatenate([cls, patches], 1) + n(layer.position_embeddings)
    np.testing.assert_allclose(n(layer(images)), expected, rtol=1e-5, atol=1e-5)


def test_sincos_is_fixed_and_matches_table():
    layer = PatchEncoder(16, 4, class_token=False, position_embedding="sincos2d")
    images = _images(h=8, w=12)
    layer.build(images.shape)
    assert not layer.trainable_weights[2:]  # kernel, bias only
    expected = to_numpy(layer.project(images)) + sincos_2d_position_embedding((2, 3), 16)
    np.testing.assert_allclose(to_numpy(layer(images)), expected, rtol=1e-5, atol=1e-5)
    table = sincos_2d_position_embedding((2, 3), 16)[0]
    np.testing.assert_allclose(table[4, :4], np.sin(1.0 / 10_000 ** (np.arange(4) / 3)), rtol=1e-6)


def test_patch_mask_replaces_embeddings():
    layer = PatchEncoder(8, 4, class_token=True, position_embedding=None, use_mask_embedding=True)
    images = _images(h=8, w=8)
    mask = np.array([[True, False, False, True], [False, False, False, False]])
    out = to_numpy(layer(images, patch_mask=mask))
    plain = to_numpy(layer(images))
    emb = to_numpy(layer.mask_embedding)[0, 0]
    np.testing.assert_allclose(out[0, 1], emb, rtol=1e-6)
    np.testing.assert_allclose(out[0, 4], emb, rtol=1e-6)
    np.testing.assert_allclose(out[0, [0, 2, 3]], plain[0, [0, 2, 3]], rtol=1e-6)
    np.testing.assert_allclose(out[1], plain[1], rtol=1e-6)


def test_patch_mask_needs_mask_embedding():
    layer = PatchEncoder(8, 4)
    with pytest.raises(ValueError, match="use_mask_embedding"):
        layer(_images(h=8, w=8), patch_mask=np.zeros((2, 4), bool))


def test_mask_as_functional_input(tmp_path):
    images = keras.Input((8, 8, 3))
    mask = keras.Input((4,), dtype="bool")
    encoder = PatchEncoder(8, 4, use_mask_embedding=True)
    model = keras.Model([images, mask], encoder(images, patch_mask=mask))
    x, m = _images(h=8, w=8), np.random.rand(2, 4) > 0.5
    roundtrip_model(model, [x, m], tmp_path)


def _official_resize(posemb, new_grid, prefix):
    """The official vit_jax loader, written out independently (square or not)."""
    tok, grid = posemb[:, :prefix], posemb[0, prefix:]
    side = int(np.sqrt(len(grid)))
    grid = grid.reshape(side, side, -1)
    zoom = (new_grid[0] / side, new_grid[1] / side, 1)
    grid = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, new_grid[0] * new_grid[1], -1)
    return np.concatenate([tok, grid], axis=1)


@pytest.mark.parametrize("new_grid,prefix", [((4, 4), 1), ((3, 5), 1), ((2, 2), 0), ((6, 6), 0)])
def test_resample_matches_official_loader(new_grid, prefix):
    posemb = np.random.rand(1, prefix + 9, 8).astype("float32")
    out = resample_position_embedding(posemb, new_grid, num_prefix_tokens=prefix)
    np.testing.assert_allclose(out, _official_resize(posemb, new_grid, prefix), rtol=1e-6)
    assert out.shape == (1, prefix + new_grid[0] * new_grid[1], 8)


def test_layer_resample_and_load():
    small = PatchEncoder(8, 4)
    small.build((None, 12, 12, 3))
    big = PatchEncoder(8, 4)
    big.build((None, 16, 20, 3))
    resampled = small.resampled_position_embedding((4, 5))
    big.load_position_embedding(to_numpy(small.position_embeddings))
    np.testing.assert_allclose(to_numpy(big.position_embeddings), resampled, rtol=1e-6)
    np.testing.assert_allclose(resampled[:, 0], to_numpy(small.position_embeddings)[:, 0])


def test_resample_errors():
    with pytest.raises(ValueError, match="square grid.*10"):
        resample_position_embedding(np.zeros((1, 11, 4)), (4, 4))
    with pytest.raises(ValueError, match="grid_size"):
        resample_position_embedding(np.zeros((1, 13, 4)), (4, 4), old_grid=(3, 3))
    layer = PatchEncoder(8, 4, position_embedding="sincos2d")
    layer.build((None, 8, 8, 3))
    with pytest.raises(ValueError, match="no learned position embedding"):
        layer.resampled_position_embedding((3, 3))


def test_call_time_shape_errors():
    layer = PatchEncoder(8, 4)
    layer.build((None, 8, 8, 3))
    with pytest.raises(ValueError, match="3 channels.*Received: 1"):
        layer(_images(h=8, w=8, c=1))
    with pytest.raises(ValueError, match=r"size \(8, 8\).*height of 12"):
        layer(_images(h=12, w=8))
    with pytest.raises(ValueError, match="rank 4"):
        layer(np.zeros((2, 8, 8), "float32"))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(hidden_dim=0, patch_size=4), "hidden_dim"),
        (dict(hidden_dim=8, patch_size=4, position_embedding="rope"), "position_embedding"),
        (dict(hidden_dim=10, patch_size=4, position_embedding="sincos2d"), "divisible by 4"),
        (dict(hidden_dim=8, patch_size=4, dropout_rate=1.0), "dropout_rate"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PatchEncoder(**kwargs)


def _randomized(layer, shape):
    layer.build(shape)
    rng = np.random.default_rng(0)
    for w in layer.weights:
        w.assign(rng.normal(size=tuple(w.shape)).astype("float32"))
    return layer


@pytest.mark.parametrize("prefix_position_embedding", [True, False])
def test_prefix_token_order_and_positions(prefix_position_embedding):
    """[cls, dist, registers..., patches] as timm; positions on the prefix rows or not."""
    layer = PatchEncoder(
        8,
        4,
        distillation_token=True,
        num_register_tokens=2,
        prefix_position_embedding=prefix_position_embedding,
    )
    images = _images(h=8, w=12)
    _randomized(layer, images.shape)
    n = to_numpy
    patches = n(Patches(4)(images)) @ n(layer.kernel).reshape(-1, 8) + n(layer.bias)
    prefix = np.concatenate(
        [n(layer.class_embedding), n(layer.distillation_embedding), n(layer.register_embeddings)], 1
    )
    table = n(layer.position_embeddings)
    assert table.shape == (1, (4 if prefix_position_embedding else 0) + 6, 8)
    rows = 4 if prefix_position_embedding else 0
    if rows:
        prefix = prefix + table[:, :rows]
    expected = np.concatenate([np.broadcast_to(prefix, (2, 4, 8)), patches + table[:, rows:]], 1)
    np.testing.assert_allclose(n(layer(images)), expected, rtol=1e-5, atol=1e-5)
    assert layer.num_prefix_tokens == 4 and layer.num_prefix_positions == rows


def test_dynamic_image_size_resamples_the_table():
    """Any multiple of the patch; the stored (2, 3) grid is resampled bicubically (timm)."""
    layer = PatchEncoder(8, 4, num_register_tokens=1, dynamic_image_size=True,
                         position_embedding_grid=(2, 3))
    _randomized(layer, (None, None, None, 3))
    assert layer.grid_size == (2, 3) and layer.image_size == (8, 12)
    n = to_numpy
    table = n(layer.position_embeddings)
    for height, width in ((8, 12), (12, 8), (20, 16)):
        images = _images(h=height, w=width)
        grid = (height // 4, width // 4)
        patches = n(Patches(4)(images)) @ n(layer.kernel).reshape(-1, 8) + n(layer.bias)
        positions = resize_bicubic(table[0, 2:].reshape(2, 3, 8), grid).reshape(1, -1, 8)
        prefix = np.concatenate([n(layer.class_embedding), n(layer.register_embeddings)], 1)
        expected = np.concatenate(
            [np.broadcast_to(prefix + table[:, :2], (2, 2, 8)), patches + positions], 1
        )
        np.testing.assert_allclose(n(layer(images)), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="width must be divisible by the patch size"):
        layer(_images(h=8, w=10))


def test_dynamic_sincos_matches_the_numpy_table():
    layer = PatchEncoder(16, 4, class_token=False, position_embedding="sincos2d",
                         dynamic_image_size=True, position_embedding_grid=(2, 2))
    layer.build((None, None, None, 3))
    images = _images(h=12, w=20)
    expected = to_numpy(layer.project(images)) + sincos_2d_position_embedding((3, 5), 16)
    np.testing.assert_allclose(to_numpy(layer(images)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,rows",
    [
        (dict(class_token=False), 0),
        (dict(distillation_token=True, num_register_tokens=2), 4),
        (dict(num_register_tokens=2, prefix_position_embedding=False), 0),
    ],
)
def test_resample_and_load_keep_every_prefix_row(kwargs, rows):
    small = _randomized(PatchEncoder(8, 4, **kwargs), (None, 12, 12, 3))
    big = PatchEncoder(8, 4, **kwargs)
    big.build((None, 16, 20, 3))
    table = to_numpy(small.position_embeddings)
    for interpolation in ("linear", "bicubic"):
        resampled = small.resampled_position_embedding((4, 5), interpolation=interpolation)
        assert resampled.shape == (1, rows + 20, 8)
        np.testing.assert_array_equal(resampled[:, :rows], table[:, :rows])
        big.load_position_embedding(table, interpolation=interpolation)
        np.testing.assert_allclose(to_numpy(big.position_embeddings), resampled, rtol=1e-6)
    expected = resize_bicubic(table[0, rows:].reshape(3, 3, 8), (4, 5)).reshape(1, 20, 8)
    np.testing.assert_allclose(resampled[:, rows:], expected, rtol=1e-5, atol=1e-6)


def test_position_embedding_grid_errors():
    with pytest.raises(ValueError, match="position_embedding_grid"):
        PatchEncoder(8, 4, dynamic_image_size=True).build((None, None, None, 3))
    with pytest.raises(ValueError, match=r"position_embedding_grid=\(3, 3\).*\(2, 2\)"):
        PatchEncoder(8, 4, position_embedding_grid=(3, 3)).build((None, 8, 8, 3))
    with pytest.raises(ValueError, match="num_register_tokens"):
        PatchEncoder(8, 4, num_register_tokens=-1)
    with pytest.raises(ValueError, match="distillation_token must be a bool"):
        PatchEncoder(8, 4, distillation_token=1)


def _np_bilinear_align_corners(grid, size):
    """PyTorch's `F.interpolate(mode="bilinear", align_corners=True)` of a (h, w, C) grid."""

    def matrix(n_out, n_in):
        m = np.zeros((n_out, n_in))
        for i in range(n_out):
            x = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
            low = min(int(np.floor(x)), n_in - 1)
            high = min(low + 1, n_in - 1)
            m[i, low] += 1 - (x - low)
            m[i, high] += x - low
        return m

    return np.einsum("ia,abc,jb->ijc", matrix(size[0], grid.shape[0]), grid,
                     matrix(size[1], grid.shape[1]))  # fmt: skip


def test_dynamic_image_size_bilinear_align_corners_resize():
    """Qwen3-VL's resize at every call: bilinear, no antialias, align_corners=True."""
    resize = dict(position_embedding_interpolation="bilinear", position_embedding_antialias=False,
                  position_embedding_align_corners=True)  # fmt: skip
    layer = PatchEncoder(8, 4, class_token=False, dynamic_image_size=True,
                         position_embedding_grid=(3, 3), **resize)  # fmt: skip
    _randomized(layer, (None, None, None, 3))
    assert {k: layer.get_config()[k] for k in resize} == resize
    n = to_numpy
    table = n(layer.position_embeddings)[0].reshape(3, 3, 8)
    for height, width in ((12, 12), (20, 8), (8, 28)):
        images = _images(h=height, w=width)
        patches = n(Patches(4)(images)) @ n(layer.kernel).reshape(-1, 8) + n(layer.bias)
        positions = _np_bilinear_align_corners(table, (height // 4, width // 4))
        expected = patches + positions.reshape(1, -1, 8)
        np.testing.assert_allclose(n(layer(images)), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="position_embedding_interpolation must be one of"):
        PatchEncoder(8, 4, position_embedding_interpolation="nearest")
    with pytest.raises(ValueError, match="align_corners=True needs position_embedding_antialias"):
        PatchEncoder(8, 4, position_embedding_align_corners=True)
