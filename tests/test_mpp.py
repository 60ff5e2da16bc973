"""Tests for keras_vit/mpp.py (masked patch prediction) and the pretrain-mpp recipe."""

import json
import os

import keras
import numpy as np
import pytest

from keras_vit import mpp
from keras_vit.layers import PatchEncoder
from keras_vit.models.config import ViTConfig
from tests.helpers import check_config_complete, np_patches, to_numpy

# ----------------------------------------------------------------------------- corruption


def _draw(batch, num_patches, **kwargs):
    return [to_numpy(t) for t in mpp.sample_corruption(batch, num_patches, **kwargs)]


def test_corruption_statistics_80_10_10():
    mask, source, weights = _draw(4000, 16, seed=3)
    corrupted = weights.astype(bool)
    # Exactly round(0.5 * 16) = 8 patches per image.
    np.testing.assert_array_equal(weights.sum(1), np.full(4000, 8.0))
    positions = np.arange(16)[None]
    replaced = source != positions
    assert not (mask & ~corrupted).any(), "mask embedding outside the corrupted patches"
    assert not (replaced & ~corrupted).any(), "random replacement outside the corrupted patches"
    assert not (mask & replaced).any()
    n = corrupted.sum()
    assert abs(mask.sum() / n - 0.8) < 0.01
    assert abs(replaced.sum() / n - 0.1) < 0.01
    assert abs((corrupted & ~mask & ~replaced).sum() / n - 0.1) < 0.01
    # Every position is equally likely to be corrupted.
    np.testing.assert_allclose(corrupted.mean(0), 0.5, atol=0.03)
    # Replacements borrow another patch of the same image, uniformly.
    assert ((source >= 0) & (source < 16)).all()
    offsets = (source - positions)[replaced] % 16
    assert offsets.min() >= 1
    counts = np.bincount(offsets, minlength=16)[1:]
    assert counts.min() > 0.5 * counts.mean()


@pytest.mark.parametrize(
    "num_patches, rate, expected", [(16, 0.25, 4), (10, 0.3, 3), (49, 0.5, 25), (16, 0.0, 0)]
)
def test_corruption_exact_count_per_image(num_patches, rate, expected):
    assert mpp.num_corrupted(num_patches, rate) == expected
    mask, source, weights = _draw(64, num_patches, corruption_rate=rate, seed=0)
    np.testing.assert_array_equal(weights.sum(1), np.full(64, float(expected)))


def test_corruption_rates_are_arguments():
    mask, source, weights = _draw(2000, 16, mask_fraction=0.0, random_fraction=1.0, seed=1)
    corrupted = weights.astype(bool)
    assert not mask.any()
    np.testing.assert_array_equal(source != np.arange(16)[None], corrupted)
    mask, source, weights = _draw(2000, 16, mask_fraction=0.5, random_fraction=0.2, seed=2)
    n = weights.sum()
    assert abs(mask.sum() / n - 0.5) < 0.02
    assert abs((source != np.arange(16)[None]).sum() / n - 0.2) < 0.02


def test_corruption_seeding():
    a = _draw(8, 16, seed=5)
    b = _draw(8, 16, seed=5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    generator = keras.random.SeedGenerator(5)
    first = _draw(8, 16, seed=generator)
    second = _draw(8, 16, seed=generator)
    assert not np.array_equal(first[2], second[2]), "a SeedGenerator must give fresh draws"


def test_corruption_argument_errors():
    with pytest.raises(ValueError, match="corruption_rate"):
        mpp.sample_corruption(2, 16, corruption_rate=1.5)
    with pytest.raises(ValueError, match="mask_fraction \\+ random_fraction"):
        mpp.sample_corruption(2, 16, mask_fraction=0.8, random_fraction=0.3)
    with pytest.raises(ValueError, match="target must be one of"):
        mpp.patch_targets(np.zeros((1, 8, 8, 3), "float32"), 4, target="colour")


def test_patch_corruption_layer_config_and_shapes():
    layer = mpp.PatchCorruption(4, corruption_rate=0.25, seed=7)
    check_config_complete(layer)
    mask, source, weights = layer(np.zeros((3, 16, 8, 1), "float32"))
    assert tuple(mask.shape) == tuple(source.shape) == tuple(weights.shape) == (3, 8)
    np.testing.assert_array_equal(to_numpy(weights).sum(1), [2, 2, 2])
    check_config_complete(mpp.PatchTargets(4, target="downsampled"))


# --------------------------------------------------------- corrupted embeddings (PatchEncoder)


def test_patch_encoder_patch_source_and_mask():
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    encoder = PatchEncoder(8, 4, use_mask_embedding=True, position_embedding="learned")
    encoder.build(images.shape)
    mask, source, weights = _draw(4, 16, seed=11)
    mask[0, :2] = True  # make sure each kind occurs
    source[1, 3] = 7
    plain = to_numpy(encoder(images))
    identity = np.tile(np.arange(16, dtype="int32"), (4, 1))
    np.testing.assert_allclose(to_numpy(encoder(images, patch_source=identity)), plain, atol=0)
    out = to_numpy(encoder(images, patch_mask=mask, patch_source=source))
    projected = to_numpy(encoder.project(images))
    pos = to_numpy(encoder.position_embeddings)[0]
    mask_embedding = to_numpy(encoder.mask_embedding)[0, 0]
    np.testing.assert_allclose(out[:, 0], plain[:, 0], atol=1e-6)  # class token untouched
    for b in range(4):
        for i in range(16):
            if mask[b, i]:
                expected = mask_embedding + pos[1 + i]
            else:
                expected = projected[b, source[b, i]] + pos[1 + i]
            np.testing.assert_allclose(out[b, 1 + i], expected, rtol=1e-5, atol=1e-5)
    untouched = ~mask & (source == np.arange(16)[None])
    np.testing.assert_array_equal(out[:, 1:][untouched], plain[:, 1:][untouched])
    with pytest.raises(ValueError, match="patch_source must have shape"):
        encoder(images, patch_source=identity[:, :5])


# ----------------------------------------------------------------------------- targets


def np_targets(images, patch, target):
    """Plain NumPy reference of the three target kinds."""
    b, h, w, c = images.shape
    patches = np_patches(images, patch).reshape(b, -1, patch, patch, c)
    weights = 8 ** np.arange(c - 1, -1, -1)

    def classes(values):  # values in [-1, 1], (..., C)
        levels = np.clip(np.floor((values + 1.0) / 2.0 * 8.0), 0, 7).astype("int64")
        return (levels * weights).sum(-1)

    if target == "pixels":
        return patches.reshape(b, patches.shape[1], -1)
    if target == "color":
        return classes(patches.mean(axis=(2, 3)))
    s = patch // 4
    cells = np.zeros((b, patches.shape[1], 4, 4, c))
    for i in range(4):
        for j in range(4):
            cells[:, :, i, j] = patches[:, :, i * s : (i + 1) * s, j * s : (j + 1) * s].mean((2, 3))
    return classes(cells).reshape(b, patches.shape[1], 16)


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("target", ["color", "downsampled", "pixels"])
def test_targets_match_numpy(target, channels):
    rng = np.random.default_rng(1)
    # Levels in steps of 1/4 land exactly on the quantisation boundaries, incl. -1 and 1.
    images = rng.integers(-4, 5, (3, 16, 24, channels)).astype("float32") / 4.0
    images[0, :8, :8] = 1.0
    images[1, :8, :8] = -1.0
    patch = 8
    got = to_numpy(mpp.patch_targets(images, patch, target))
    expected = np_targets(images.astype("float64"), patch, target)
    if target == "pixels":
        np.testing.assert_allclose(got, expected, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, expected)
        assert got.max() < 8**channels and got.min() >= 0
    layer_out = to_numpy(mpp.PatchTargets(patch, target)(images))
    np.testing.assert_array_equal(layer_out, got)


def test_color_target_is_the_top_three_bits_of_8_bit_pixels():
    """App. B.1.2's "3-bit colour": for 0..255 images preprocessed to [-1, 1] (x / 127.5 - 1)
    the level of every value is its top three bits, `p >> 5`, for all 256 values."""
    values = np.arange(256)
    gray = (values.reshape(1, 16, 16, 1) / 127.5 - 1.0).astype("float32")
    levels = to_numpy(mpp.patch_targets(gray, 1))  # 1 px patches: the mean is the pixel
    np.testing.assert_array_equal(levels.reshape(-1), values >> 5)
    # 4x4 cells of a 4 px patch are its pixels: the "downsampled" target is per-pixel levels.
    cells = to_numpy(mpp.patch_targets(gray, 4, "downsampled"))
    np.testing.assert_array_equal(cells.reshape(4, 4, 4, 4).transpose(0, 2, 1, 3).reshape(16, 16),
                                  (values >> 5).reshape(16, 16))
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (2, 4, 4, 3))
    classes = to_numpy(mpp.patch_targets((rgb / 127.5 - 1.0).astype("float32"), 1))
    top = rgb.reshape(2, 16, 3) >> 5
    np.testing.assert_array_equal(classes, top[..., 0] * 64 + top[..., 1] * 8 + top[..., 2])


def test_color_target_class_layout():
    image = np.zeros((1, 4, 4, 3), "float32")
    image[..., 0], image[..., 1], image[..., 2] = 1.0, -1.0, 0.0  # levels 7, 0, 4
    assert to_numpy(mpp.patch_targets(image, 4))[0, 0] == 7 * 64 + 0 * 8 + 4
    assert mpp.num_target_classes("color", 3) == 512
    assert mpp.num_target_classes("downsampled", 1) == 8
    with pytest.raises(ValueError, match="divisible by 4"):
        mpp.patch_targets(np.zeros((1, 6, 6, 3), "float32"), 6, "downsampled")


# ----------------------------------------------------------------------------- loss


@pytest.mark.parametrize("target", ["color", "downsampled", "pixels"])
def test_loss_ignores_uncorrupted_patches(target):
    rng = np.random.default_rng(2)
    images = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    targets = to_numpy(mpp.patch_targets(images, 4, target))
    shape = {"color": (4, 4, 512), "downsampled": (4, 4, 16, 512), "pixels": (4, 4, 48)}[target]
    predictions = rng.normal(size=shape).astype("float32")
    weights = np.zeros((4, 4), "float32")
    weights[:, :2] = 1.0
    loss = float(to_numpy(mpp.masked_patch_loss(targets, predictions, weights, target)))
    changed = predictions.copy()
    changed[:, 2:] = rng.normal(size=changed[:, 2:].shape) * 5
    same = float(to_numpy(mpp.masked_patch_loss(targets, changed, weights, target)))
    assert loss == pytest.approx(same, rel=1e-6, abs=1e-6)
    changed[:, :1] += 3.0 * rng.normal(size=changed[:, :1].shape).astype("float32")
    other = float(to_numpy(mpp.masked_patch_loss(targets, changed, weights, target)))
    assert abs(other - loss) > 1e-3
    # NumPy reference: mean over the corrupted patches of the per-patch loss.
    if target == "pixels":
        per_patch = ((predictions - targets) ** 2).mean(-1)
    else:
        logits = predictions - predictions.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        per_patch = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
        if target == "downsampled":
            per_patch = per_patch.mean(-1)
    assert loss == pytest.approx(per_patch[:, :2].mean(), rel=1e-4)


def test_loss_sample_weights_drop_padding():
    """A padded evaluation batch (weights padded/real on real images, 0 on blanks) gives the loss
    of the real images alone; weights of 1 change nothing (Keras' sum-over-batch-size)."""
    model = mpp.build_mpp_model("mu/4", image_size=16, num_channels=1, seed=0)
    x = np.random.default_rng(3).uniform(-1, 1, (6, 16, 16, 1)).astype("float32")
    x[4:] = 0.0
    y_pred = model(x)
    real = {key: value[:4] for key, value in y_pred.items()}
    alone = float(to_numpy(model.compute_loss(y_pred=real)))
    weights = np.array([1.5] * 4 + [0.0] * 2, "float32")
    padded = float(to_numpy(model.compute_loss(y_pred=y_pred, sample_weight=weights)))
    assert padded == pytest.approx(alone, rel=1e-6)
    ones = float(to_numpy(model.compute_loss(y_pred=y_pred, sample_weight=np.ones(6, "float32"))))
    assert ones == pytest.approx(float(to_numpy(model.compute_loss(y_pred=y_pred))), rel=1e-6)


# ----------------------------------------------------------------------------- model


@pytest.mark.slow
def test_mpp_model_trains_saves_and_gives_its_encoder(tmp_path):
    model = mpp.build_mpp_model("mu/4", image_size=16, num_channels=1, seed=0)
    assert model.output["predictions"].shape == (None, 16, 8)
    names = {layer.name for layer in model.layers}
    assert {"patch_encoder", "encoderblock_0", "encoderblock_1", "encoder_norm"} <= names
    rng = np.random.default_rng(0)
    x = np.clip(rng.normal(0, 0.6, (32, 16, 16, 1)), -1, 1).astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    before = model.evaluate(x, batch_size=32, verbose=0)
    history = model.fit(x, batch_size=16, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0]
    assert model.evaluate(x, batch_size=32, verbose=0) < before
    path = str(tmp_path / "mpp.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_config() == model.get_config()
    for a, b in zip(model.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    encoder = mpp.extract_encoder(loaded)
    assert encoder.output_shape == (None, 17, 32)
    paths = [w.path for w in encoder.weights]
    assert not any("mask_embedding" in p or "mpp_head" in p for p in paths)
    for w in encoder.weights:
        source = loaded.get_layer(w.path.split("/")[0])
        match = [v for v in source.weights if v.path == w.path]
        np.testing.assert_array_equal(to_numpy(w), to_numpy(match[0]))
    # Without corruption the MPP model's tokens are the encoder's tokens.
    clean = mpp.build_mpp_model("mu/4", image_size=16, num_channels=1, corruption_rate=0.0)
    clean.set_weights(model.get_weights())
    tokens = keras.Model(clean.input, clean.get_layer("encoder_norm").output)(x[:4])
    np.testing.assert_allclose(
        to_numpy(mpp.extract_encoder(clean)(x[:4])), to_numpy(tokens), atol=1e-5
    )


@pytest.mark.parametrize("target, shape", [("downsampled", (16, 16, 512)), ("pixels", (16, 48))])
def test_mpp_model_other_targets(target, shape):
    model = mpp.build_mpp_model("mu/4", image_size=16, target=target, seed=0)
    assert model.output["predictions"].shape == (None, *shape)
    model.compile(optimizer="adam")
    x = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    loss = model.fit(x, batch_size=8, epochs=1, verbose=0).history["loss"][0]
    assert np.isfinite(loss)


def test_mpp_model_with_registers_and_timm_options_gives_its_encoder():
    """Register / distillation tokens, no prefix position rows, pre-norm, qk-norm, QuickGELU."""
    options = dict(
        num_register_tokens=2,
        distillation_token=True,
        prefix_position_embedding=False,
        pre_norm=True,
        qk_norm=True,
        activation="quick_gelu",
    )
    model = mpp.build_mpp_model("mu/4", image_size=16, num_layers=1, seed=0, **options)
    assert model.output["predictions"].shape == (None, 16, 512)  # prefix tokens dropped
    x = np.random.default_rng(0).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    assert np.isfinite(to_numpy(model.compute_loss(y_pred=model(x))))
    encoder = mpp.extract_encoder(model)
    assert encoder.output_shape == (None, 4 + 16, 32)
    assert ViTConfig.from_model(encoder).to_kwargs("encoder") == {
        **ViTConfig.from_variant("mu/4", **options).to_kwargs("encoder"),
        "class_token": True,
    }
    clean = mpp.build_mpp_model(
        "mu/4", image_size=16, num_layers=1, corruption_rate=0.0, **options
    )
    clean.set_weights(model.get_weights())
    tokens = keras.Model(clean.input, clean.get_layer("encoder_norm").output)(x)
    np.testing.assert_allclose(to_numpy(encoder(x)), to_numpy(tokens), atol=1e-5)


def test_mpp_model_errors():
    with pytest.raises(ValueError, match="hybrid"):
        mpp.build_mpp_model("R+Ti/16", image_size=64)
    with pytest.raises(ValueError, match="Unknown encoder arguments"):
        mpp.build_mpp_model("mu/4", image_size=16, width=3)
    with pytest.raises(ValueError, match="MaskedPatchPredictor"):
        mpp.extract_encoder(keras.Sequential([keras.layers.Dense(2)]))


# ----------------------------------------------------------------------------- recipe


@pytest.mark.slow
def test_pretrain_mpp_recipe_smoke_then_finetune_init(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("sklearn")
    from keras_vit.cli import main

    out = str(tmp_path / "mpp")
    argv = ["pretrain-mpp", "--smoke", "--out", out, "--verbose", "0"]
    assert main(argv) == 0
    for name in ("model.keras", "encoder.keras", "metrics.json", "log.csv"):
        assert os.path.exists(os.path.join(out, name)), name
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["config"]["optimizer"] == "adam"
    assert np.isfinite(metrics["history"]["loss"]).all()
    assert np.isfinite(metrics["eval_loss"])
    assert metrics["eval_loss"] < metrics["initial_eval_loss"]
    encoder = keras.saving.load_model(os.path.join(out, "encoder.keras"))
    assert encoder.output_shape == (None, 17, 32)
    # The fine-tuning recipe starts from the encoder with one flag.
    ft_out = str(tmp_path / "ft")
    init = os.path.join(out, "encoder.keras")
    argv = ["finetune", "--smoke", "--init", init, "--out", ft_out, "--verbose", "0"]
    assert main(argv) == 0
    with open(os.path.join(ft_out, "metrics.json")) as f:
        ft = json.load(f)
    assert ft["model"]["init"] == init
    assert ft["model"]["copied_layers"] == 4  # patch_encoder, 2 blocks, encoder_norm
    assert np.isfinite(ft["test_loss"])
    tuned = keras.saving.load_model(os.path.join(ft_out, "model.keras"))
    np.testing.assert_array_equal(
        to_numpy(tuned.get_layer("encoder_norm").gamma).shape,
        to_numpy(encoder.get_layer("encoder_norm").gamma).shape,
    )


def test_pretrain_mpp_config_has_the_paper_numbers():
    pytest.importorskip("tensorflow")
    from keras_vit.runner import pretrain_mpp

    paper = pretrain_mpp.get_config("paper")
    assert paper["optimizer"] == "adam"
    assert paper["learning_rate"] == 2e-4
    assert paper["warmup_steps"] == 10_000
    assert paper["decay"] == "cosine"
    assert paper["batch_size"] == 4096
    assert paper["steps"] == 1_000_000
    assert (paper["corruption_rate"], paper["mask_fraction"], paper["random_fraction"]) == (
        0.5,
        0.8,
        0.1,
    )
    assert paper["target"] == "color" and paper["model"] == "B/16"
    smoke = pretrain_mpp.get_config("digits", smoke=True)
    assert smoke["model"] == "mu/4" and smoke["steps"] <= 10
