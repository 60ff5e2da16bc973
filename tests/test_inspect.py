"""Tests for keras_vit/inspect.py and the `keras-vit inspect` command."""

import keras
import numpy as np
import pytest

from keras_vit import inspect as vi
from keras_vit.layers import PatchEncoder, TransformerBlock
from keras_vit.models.vit import ViT
from tests.helpers import (
    block_params,
    np_block,
    np_patches,
    np_softmax,
    np_vit_forward,
    randomize_weights,
    to_numpy,
)

# --- NumPy references ---------------------------------------------------------------------------


def np_reference_attention(model, images):
    """Attention weights of a plain ViT computed in NumPy from its weights: (B, L, H, T, T)."""
    encoder = model.get_layer("patch_encoder")
    kernel = to_numpy(encoder.kernel)
    ph, pw, c, d = kernel.shape
    x = np_patches(images, (ph, pw)) @ kernel.reshape(-1, d) + to_numpy(encoder.bias)
    if encoder.class_token:
        cls = np.broadcast_to(to_numpy(encoder.class_embedding), (x.shape[0], 1, d))
        x = np.concatenate([cls, x], axis=1)
    x = x + to_numpy(encoder.position_embeddings)
    weights = []
    for i in range(len(vi.find_transformer_blocks(model))):
        x, w = np_block(x, block_params(model.get_layer(f"encoderblock_{i}")))
        weights.append(w)
    return np.stack(weights, axis=1)


def np_rollout(attention, head_fusion, discard_ratio, has_class_token=True):
    """Rollout written as plain loops, one image and one layer at a time."""
    batch, layers, _, tokens, _ = attention.shape
    out = []
    for b in range(batch):
        result = np.eye(tokens)
        for layer in range(layers):
            heads = attention[b, layer]
            a = {"mean": heads.mean(0), "max": heads.max(0), "min": heads.min(0)}[head_fusion]
            a = a.copy()
            k = int(tokens * tokens * discard_ratio)
            if k:
                flat = a.reshape(-1)
                lowest = np.argpartition(flat, k - 1)[:k]
                if has_class_token:
                    lowest = lowest[lowest != 0]
                flat[lowest] = 0
                a = flat.reshape(tokens, tokens)
            a = a + np.eye(tokens)
            for row in range(tokens):
                a[row] /= a[row].sum()
            result = a @ result
        out.append(result)
    return np.stack(out)


def np_distance(attention, grid, cell, prefix):
    gh, gw = grid
    centres = [((i + 0.5) * cell[0], (j + 0.5) * cell[1]) for i in range(gh) for j in range(gw)]
    batch, layers, heads = attention.shape[:3]
    out = np.zeros((layers, heads))
    for layer in range(layers):
        for h in range(heads):
            values = []
            for b in range(batch):
                for q in range(gh * gw):
                    w = attention[b, layer, h, prefix + q, prefix:]
                    d = [np.hypot(centres[q][0] - y, centres[q][1] - x) for y, x in centres]
                    values.append(np.dot(w, d) / w.sum())
            out[layer, h] = np.mean(values)
    return out


def random_attention(shape, seed=0):
    rng = np.random.default_rng(seed)
    return np_softmax(rng.normal(0, 2, shape)).astype("float32")


def tiny_vit(**kwargs):
    kwargs.setdefault("image_size", 32)
    kwargs.setdefault("num_classes", 10)
    return ViT("mu/8", **kwargs)


def random_images(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def uniformise_attention(model):
    """Zeroes query and key projections so every attention logit is 0 (uniform attention)."""
    for block in vi.find_transformer_blocks(model):
        for dense in (block.attention.query_dense, block.attention.key_dense):
            dense.kernel.assign(np.zeros(tuple(dense.kernel.shape), "float32"))
            dense.bias.assign(np.zeros(tuple(dense.bias.shape), "float32"))


def png_size(path):
    from PIL import Image

    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


# --- attention maps and rollout ----------------------------------------------------------------


def test_attention_maps_match_numpy_reference():
    model = tiny_vit()
    randomize_weights(model, scale=0.1)
    images = random_images((3, 32, 32, 3))
    maps = vi.attention_maps(model, images, batch_size=2)
    assert maps.shape == (3, 2, 2, 17, 17)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(maps, np_reference_attention(model, images), atol=2e-5)


@pytest.mark.parametrize("head_fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard_ratio", [0.0, 0.3])
def test_compute_rollout_matches_numpy(head_fusion, discard_ratio):
    attention = random_attention((2, 3, 4, 10, 10))
    got = vi.compute_rollout(attention, head_fusion, discard_ratio, num_prefix_tokens=1)
    want = np_rollout(attention.astype("float64"), head_fusion, discard_ratio)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)


def test_compute_rollout_discard_keeps_class_token_self_attention():
    attention = np.full((1, 1, 1, 5, 5), 0.2)
    attention[0, 0, 0, 0, 0] = 0.0  # the lowest entry, but it must survive (be 0 + identity)
    attention[0, 0, 0, 0, 1:] = 0.25
    rollout = vi.compute_rollout(attention, discard_ratio=0.5)
    # the class row keeps its own (zero) weight plus identity and the four 0.25 entries
    np.testing.assert_allclose(rollout[0, 0], [0.5, 0.125, 0.125, 0.125, 0.125])


def test_compute_rollout_rejects_bad_arguments():
    attention = random_attention((1, 1, 1, 5, 5))
    with pytest.raises(ValueError, match="head_fusion"):
        vi.compute_rollout(attention, head_fusion="median")
    with pytest.raises(ValueError, match="discard_ratio"):
        vi.compute_rollout(attention, discard_ratio=1.0)
    with pytest.raises(ValueError, match="attention must have shape"):
        vi.compute_rollout(attention[0])


@pytest.mark.parametrize("head_fusion,discard_ratio", [("mean", 0.0), ("max", 0.9)])
def test_attention_rollout_model_path_matches_numpy(head_fusion, discard_ratio):
    model = tiny_vit(image_size=(32, 48))
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 48, 3))
    result = vi.attention_rollout(model, images, head_fusion, discard_ratio)
    assert result.grid.shape == (2, 4, 6) and result.image.shape == (2, 32, 48)
    rollout = np_rollout(np_reference_attention(model, images), head_fusion, discard_ratio)
    np.testing.assert_allclose(
        result.grid, rollout[:, 0, 1:].reshape(2, 4, 6), rtol=1e-4, atol=1e-6
    )
    # the up-sampled map is the grid map resized bilinearly (half-pixel centres, edges clamped)
    from skimage.transform import resize

    for grid, image in zip(result.grid, result.image, strict=True):
        want = resize(grid.astype("float64"), (32, 48), order=1, mode="edge", anti_aliasing=False)
        np.testing.assert_allclose(image, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("pooling", ["token", "gap"])
def test_uniform_attention_gives_uniform_map(pooling):
    model = tiny_vit(pooling=pooling)
    randomize_weights(model, scale=0.1)
    uniformise_attention(model)
    images = random_images((2, 32, 32, 3))
    maps = vi.attention_maps(model, images)
    tokens = 16 + (pooling == "token")
    np.testing.assert_allclose(maps, 1.0 / tokens, atol=1e-6)
    result = vi.attention_rollout(model, images)
    assert result.grid.shape == (2, 4, 4)
    np.testing.assert_allclose(result.grid, result.grid[:, :1, :1] * np.ones((1, 4, 4)), rtol=1e-5)
    np.testing.assert_allclose(
        result.image, result.grid[:, :1, :1] * np.ones((1, 32, 32)), rtol=1e-5
    )
    if pooling == "gap":  # no class token: the mean row of the rollout, 1 / T everywhere
        np.testing.assert_allclose(result.grid, 1.0 / 16, rtol=1e-5)
    else:  # class token: (1 - 2**-L) / T on every patch (eigen-decomposition of (I + J/T) / 2)
        np.testing.assert_allclose(result.grid, (1 - 2.0**-2) / 17, rtol=1e-5)


# --- mean attention distance -------------------------------------------------------------------


@pytest.mark.parametrize("prefix", [0, 1])
def test_compute_attention_distance_matches_numpy(prefix):
    attention = random_attention((2, 3, 2, prefix + 6, prefix + 6), seed=1)
    got = vi.compute_attention_distance(attention, (2, 3), (4.0, 8.0), num_prefix_tokens=prefix)
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, np_distance(attention, (2, 3), (4.0, 8.0), prefix), rtol=1e-5)


def test_attention_distance_is_zero_for_self_attention():
    eye = np.broadcast_to(np.eye(13), (2, 3, 4, 13, 13))
    np.testing.assert_array_equal(vi.compute_attention_distance(eye, (3, 4), (16.0, 16.0)), 0.0)
    # all attention on the class token: no patch weight, distance 0 rather than NaN
    to_cls = np.zeros((1, 1, 1, 5, 5))
    to_cls[..., 0] = 1.0
    np.testing.assert_array_equal(vi.compute_attention_distance(to_cls, (2, 2), (8.0, 8.0)), 0.0)


def test_attention_distance_known_value():
    # two patches side by side, each attends only to the other: one cell width apart
    swap = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])[None, None, None]
    np.testing.assert_allclose(vi.compute_attention_distance(swap, (1, 2), (16.0, 12.0)), [[12.0]])


def test_mean_attention_distance_model_matches_numpy():
    model = tiny_vit(image_size=(32, 48))
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 48, 3))
    got = vi.mean_attention_distance(model, images)
    want = np_distance(np_reference_attention(model, images), (4, 6), (8.0, 8.0), 1)
    assert got.shape == (2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_mean_attention_distance_uniform_attention():
    model = tiny_vit()
    uniformise_attention(model)
    got = vi.mean_attention_distance(model, random_images((1, 32, 32, 3)))
    centres = [((i + 0.5) * 8, (j + 0.5) * 8) for i in range(4) for j in range(4)]
    mean_pair = np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a in centres for b in centres])
    np.testing.assert_allclose(got, mean_pair, rtol=1e-5)


# --- position embeddings and filters -----------------------------------------------------------


@pytest.mark.parametrize("position_embedding", ["learned", "sincos2d"])
def test_position_embedding_similarity(position_embedding):
    model = tiny_vit(image_size=(32, 48), position_embedding=position_embedding)
    sim = vi.position_embedding_similarity(model)
    assert sim.shape == (4, 6, 4, 6)
    flat = sim.reshape(24, 24)
    np.testing.assert_allclose(np.diag(flat), 1.0, atol=1e-6)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    table = vi.patch_position_embeddings(model)
    if position_embedding == "learned":
        embeddings = to_numpy(model.get_layer("patch_encoder").position_embeddings)
        np.testing.assert_allclose(table, embeddings[0, 1:])
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    np.testing.assert_allclose(flat, unit @ unit.T, atol=1e-6)


@pytest.mark.parametrize(
    "options",
    [
        dict(num_register_tokens=2, pooling="gap"),  # registers, no class token
        dict(num_register_tokens=1, distillation_token=True, prefix_position_embedding=False),
        dict(pooling="map", qk_norm=True),
    ],
    ids=["registers_gap", "dist_registers_no_prefix_rows", "map"],
)
def test_models_with_prefix_tokens(options):
    """Attention, rollout, distances and position embeddings skip register / dist tokens."""
    model = tiny_vit(**options)
    randomize_weights(model, scale=0.1)
    images = random_images((2, 32, 32, 3))
    prefix = model.get_layer("patch_encoder").num_prefix_tokens
    has_class = model.get_layer("patch_encoder").class_token
    attention = np_vit_forward(model, images, return_attention=True, **options)
    maps = vi.attention_maps(model, images)
    assert maps.shape == (2, 2, 2, prefix + 16, prefix + 16)
    np.testing.assert_allclose(maps, attention, atol=2e-5)
    rollout = np_rollout(attention, "mean", 0.0, has_class_token=has_class)
    expected = rollout[:, 0, prefix:] if has_class else rollout[:, prefix:, prefix:].mean(1)
    result = vi.attention_rollout(model, images)
    np.testing.assert_allclose(result.grid, expected.reshape(2, 4, 4), rtol=1e-4, atol=1e-6)
    distances = vi.mean_attention_distance(model, images)
    np.testing.assert_allclose(
        distances, np_distance(attention, (4, 4), (8.0, 8.0), prefix), rtol=1e-4
    )
    table = to_numpy(model.get_layer("patch_encoder").position_embeddings)[0, -16:]
    np.testing.assert_allclose(vi.patch_position_embeddings(model), table)
    assert vi.position_embedding_similarity(model).shape == (4, 4, 4, 4)


def test_position_embedding_similarity_needs_an_embedding():
    model = tiny_vit(position_embedding=None)
    with pytest.raises(ValueError, match="no position embedding"):
        vi.position_embedding_similarity(model)


def test_embedding_filters():
    model = tiny_vit()
    filters = vi.embedding_filters(model, n=6)
    assert filters.shape == (6, 8, 8, 3)
    flat = filters.reshape(6, -1).astype("float64")
    np.testing.assert_allclose(flat @ flat.T, np.eye(6), atol=1e-5)
    kernel = to_numpy(model.get_layer("patch_encoder").kernel).reshape(-1, 32).T
    _, s, vt = np.linalg.svd(kernel - kernel.mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(flat), np.abs(vt[:6]), atol=1e-5)
    # each component explains the variance its singular value says, in decreasing order
    centred = kernel - kernel.mean(0)
    np.testing.assert_allclose(np.linalg.norm(centred @ flat.T, axis=0), s[:6], rtol=1e-4)
    with pytest.raises(ValueError, match="n must be an integer in \\[1, 32\\]"):
        vi.embedding_filters(model, n=33)


# --- pictures and command line -----------------------------------------------------------------


def test_plots_write_pngs_of_the_expected_size(tmp_path):
    images = [random_images((32, 48, 3)), np.full((20, 20), 200, "uint8")]
    maps = [np.random.rand(4, 6), np.random.rand(2, 2)]
    path = vi.plot_attention_overlay(images, maps, tmp_path / "a" / "overlay.png", dpi=40)
    assert png_size(path) == (3 * 100, 2 * 100)
    path = vi.plot_attention_distance(np.random.rand(3, 4) * 10, tmp_path / "dist.png", dpi=50)
    assert png_size(path) == (250, 200)
    sim = np.random.rand(3, 5, 3, 5)
    path = vi.plot_position_embedding_similarity(sim, tmp_path / "sim.png", figsize=(4, 3), dpi=50)
    assert png_size(path) == (200, 150)
    filters = np.random.rand(10, 4, 4, 3)
    path = vi.plot_embedding_filters(
        filters, tmp_path / "filters.png", columns=4, panel_size=1.0, dpi=30
    )
    assert png_size(path) == (120, 3 * 30 + 9)
    for name in ("a/overlay.png", "dist.png", "sim.png", "filters.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_inspect_command(tmp_path, capsys):
    from PIL import Image

    from keras_vit.cli import main
    from keras_vit.preprocessing import load_image

    model = tiny_vit()
    model_path = str(tmp_path / "model.keras")
    model.save(model_path)
    image_path = str(tmp_path / "photo.png")
    pixels = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype="uint8")
    Image.fromarray(pixels).save(image_path)
    out = tmp_path / "plots"
    assert main(["inspect", model_path, "--image", image_path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = [
        "attention_overlay.png",
        "attention_distance.png",
        "position_embedding_similarity.png",
        "embedding_filters.png",
    ]
    assert printed == [str(out / name) for name in names]
    for name in names:
        assert (out / name).stat().st_size > 1000
    assert png_size(out / "attention_overlay.png") == (750, 250)
    assert png_size(out / "attention_distance.png") == (500, 400)
    # the image read by the command is resized to the model input and mapped to [-1, 1]
    images, display = load_image(image_path, (32, 32), 3)
    assert images.shape == (1, 32, 32, 3) and images.min() >= -1 and images.max() <= 1
    assert display.shape == (40, 60, 3)
    missing = str(tmp_path / "no.png")
    assert main(["inspect", model_path, "--image", missing, "--out", str(out)]) == 2
    assert missing in capsys.readouterr().err


def test_inspect_command_names_a_file_that_is_not_an_image(tmp_path, capsys):
    from keras_vit.cli import main

    model_path = str(tmp_path / "model.keras")
    tiny_vit().save(model_path)
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    code = main(["inspect", model_path, "--image", str(notes), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-vit inspect: error: ") and str(notes) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


# --- hybrid models: the grid comes from the stem -----------------------------------------------


def conv_stem_vit(image_size=32, class_token=True):
    """A functional hybrid: Conv2D stride 2 + max-pool 2 (stride 4), PatchEncoder(1), 2 blocks."""
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", name="stem_conv")(inputs)
    x = keras.layers.MaxPooling2D(2, name="stem_pool")(x)
    x = PatchEncoder(16, 1, class_token=class_token, name="patch_encoder")(x)
    for i in range(2):
        x = TransformerBlock(num_heads=2, mlp_dim=32, name=f"encoderblock_{i}")(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)
    return keras.Model(inputs, x)


def test_conv_stem_hybrid(tmp_path):
    model = conv_stem_vit()
    geometry = vi.model_geometry(model)
    assert geometry.grid_size == (8, 8)
    assert geometry.cell_size == (4.0, 4.0)  # 32 px / 8 cells, not the patch size 1
    images = random_images((2, 32, 32, 3))
    maps = vi.attention_maps(model, images)
    assert maps.shape == (2, 2, 2, 65, 65)
    distances = vi.mean_attention_distance(model, images)
    np.testing.assert_allclose(distances, np_distance(maps, (8, 8), (4.0, 4.0), 1), rtol=1e-5)
    result = vi.attention_rollout(model, images)
    assert result.grid.shape == (2, 8, 8) and result.image.shape == (2, 32, 32)
    expected = vi.compute_rollout(maps)[:, 0, 1:].reshape(2, 8, 8)
    np.testing.assert_allclose(result.grid, expected, rtol=1e-5)
    assert vi.position_embedding_similarity(model).shape == (8, 8, 8, 8)
    assert vi.embedding_filters(model, n=4).shape == (4, 1, 1, 8)
    paths = vi.save_inspection_figures(model, images[:1], tmp_path)
    assert len(paths) == 4
    for path in paths.values():
        assert png_size(path)[0] > 0


def test_builder_hybrid():
    model = ViT("R+mu/8", image_size=32, num_classes=10)
    geometry = vi.model_geometry(model)
    encoder = vi.find_patch_encoder(model)
    assert geometry.grid_size == tuple(encoder.grid_size)
    assert geometry.cell_size == (32 / encoder.grid_size[0], 32 / encoder.grid_size[1])
    images = random_images((1, 32, 32, 3))
    tokens = 1 + encoder.grid_size[0] * encoder.grid_size[1]
    assert vi.attention_maps(model, images).shape == (1, 2, 2, tokens, tokens)
    assert vi.attention_rollout(model, images).image.shape == (1, 32, 32)


def test_geometry_errors():
    inputs = keras.Input((8, 8, 3))
    with pytest.raises(ValueError, match="PatchEncoder"):
        vi.find_patch_encoder(keras.Model(inputs, keras.layers.Dense(2)(inputs)))
    with pytest.raises(ValueError, match="TransformerBlock"):
        vi.find_transformer_blocks(keras.Model(inputs, keras.layers.Dense(2)(inputs)))
    with pytest.raises(ValueError, match="images must have shape"):
        vi.attention_maps(tiny_vit(), np.zeros((1, 16, 16, 3), "float32"))
