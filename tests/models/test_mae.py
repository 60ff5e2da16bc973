"""Tests for keras_vit/models/mae.py: the masked autoencoder against NumPy, trained with `fit`
on every backend, `.keras` round trip, `extract_mae_encoder`, encoders of every position kind,
and the refusals."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit.models import ViT, ViTConfig
from keras_vit.models.mae import (
    MaskedAutoencoder,
    build_mae_model,
    extract_mae_encoder,
    mae_loss,
    patch_pixels,
)
from tests.helpers import to_numpy

TINY = dict(decoder_hidden_dim=16, decoder_num_layers=1, decoder_num_heads=2, decoder_mlp_dim=32)


def _images(n=4, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 16, 16, 3)).astype("float32")


def test_loss_equals_numpy():
    rng = np.random.default_rng(1)
    targets = rng.normal(size=(2, 16, 48)).astype("float32")
    logits = rng.normal(size=(2, 16, 48)).astype("float32")
    mask = (rng.uniform(size=(2, 16)) < 0.75).astype("float32")
    per_patch = ((logits - targets) ** 2).mean(-1)
    expected = (per_patch * mask).sum() / mask.sum()
    np.testing.assert_allclose(to_numpy(mae_loss(targets, logits, mask)), expected, rtol=1e-6)
    mean, var = targets.mean(-1, keepdims=True), targets.var(-1, ddof=1, keepdims=True)
    normed = (targets - mean) / np.sqrt(var + 1e-6)
    expected = ((((logits - normed) ** 2).mean(-1)) * mask).sum() / mask.sum()
    np.testing.assert_allclose(
        to_numpy(mae_loss(targets, logits, mask, norm_pix_loss=True)), expected, rtol=1e-5
    )


def test_targets_are_patches_in_row_column_channel_order():
    images = _images(1)
    patches = to_numpy(patch_pixels(images, (4, 4)))
    np.testing.assert_array_equal(patches[0, 5].reshape(4, 4, 3), images[0, 4:8, 4:8])


def test_outputs_mask_and_noise():
    model = build_mae_model("mu/4", image_size=16, mask_ratio=0.75, seed=0, **TINY)
    noise = np.tile(np.arange(16, dtype="float32"), (2, 1))
    out = model(_images(2), noise=noise)
    assert tuple(out["logits"].shape) == (2, 16, 48) and tuple(out["loss"].shape) == ()
    mask = to_numpy(out["mask"])
    np.testing.assert_array_equal(mask, np.tile((np.arange(16) >= 4).astype("float32"), (2, 1)))
    # the encoder saw the class token and 4 patches: its position table is MAE's, frozen
    assert not model.encoder.patch_encoder.position_embeddings.trainable
    assert len(model.trainable_weights) == len(model.weights) - 2


def test_fit_decreases_the_loss_and_round_trips(tmp_path):
    model = build_mae_model("mu/4", image_size=16, num_layers=1, seed=1, **TINY)
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-3),
        jit_compile=keras.backend.backend() != "torch",
    )
    images = _images(8)
    history = model.fit(images, batch_size=8, epochs=4, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)) and history[-1] < history[0]
    path = str(tmp_path / "mae.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    noise = np.random.default_rng(2).uniform(size=(8, 16)).astype("float32")
    a, b = model(images, noise=noise), loaded(images, noise=noise)
    np.testing.assert_allclose(to_numpy(a["logits"]), to_numpy(b["logits"]), atol=1e-6)
    encoder = extract_mae_encoder(loaded, name="pretrained")
    assert encoder.name == "pretrained" and encoder.output_shape == (None, 17, 32)
    latent, _, _ = model.encode(images, noise=np.tile(np.arange(16, dtype="float32"), (8, 1)))
    assert tuple(latent.shape) == (8, 5, 32)
    full = to_numpy(encoder(images))
    kept = to_numpy(model.encode(images, noise=np.zeros((8, 16), "float32"))[0])
    assert full.shape == (8, 17, 32) and np.isfinite(kept).all()


@pytest.mark.parametrize(
    "options",
    [
        dict(position_embedding="sincos2d"),
        dict(rotary_embedding="eva02", position_embedding=None),
        dict(class_token=False, num_register_tokens=2, prefix_position_embedding=False),
    ],
)
def test_encoders_of_other_position_kinds(options):
    model = build_mae_model("mu/4", image_size=16, num_layers=1, seed=0, **TINY, **options)
    out = model(_images(2))
    assert tuple(out["logits"].shape) == (2, 16, 48)
    assert np.isfinite(float(to_numpy(out["loss"])))


def test_rotary_encoder_sees_its_kept_tokens_at_their_positions():
    """The same 8 patches kept in two shuffles give the same latent tokens, permuted: each
    kept token carries its own position's rotary angles."""
    model = build_mae_model(
        "mu/4", image_size=16, num_layers=1, seed=0, rotary_embedding="eva02",
        position_embedding=None, mask_ratio=0.5, **TINY,
    )  # fmt: skip
    images = _images(1)
    order = np.array([[3, 0, 2, 1, 7, 5, 6, 4, 8, 9, 10, 11, 12, 13, 14, 15]], "float32")
    latent = to_numpy(model.encode(images, noise=order)[0])
    reverse = np.array([[0, 3, 2, 1, 7, 5, 6, 4, 8, 9, 10, 11, 12, 13, 14, 15]], "float32")
    again = to_numpy(model.encode(images, noise=reverse)[0])
    # the same 8 patches kept in another order: the same tokens, permuted (attention is
    # permutation-equivariant once each token carries its own rotary angles)
    first = np.argsort(order[0])[:8]
    second = np.argsort(reverse[0])[:8]
    perm = [list(first).index(i) for i in second]
    np.testing.assert_allclose(again[0, 1:], latent[0, 1:][perm], atol=1e-5)


def test_refusals():
    with pytest.raises(ValueError, match="relative_position_bias"):
        MaskedAutoencoder(
            ViTConfig.from_variant("mu/4", image_size=16, relative_position_bias="block"), **TINY
        )
    with pytest.raises(ValueError, match="expects a MaskedAutoencoder"):
        extract_mae_encoder(ViT("mu/4", image_size=16, num_classes=2))


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("mask_ratio", 1.0, "mask_ratio must be a number in"),
        ("mask_ratio", "0.75", "mask_ratio must be a number in"),
        ("mask_ratio", 0.999, "mask_ratio=0.999 drops every one of the 16 patch tokens"),
        ("decoder_hidden_dim", 16.7, "decoder_hidden_dim must be a positive integer"),
        ("decoder_hidden_dim", 0, "decoder_hidden_dim must be a positive integer"),
        ("decoder_num_layers", -1, "decoder_num_layers must be a non-negative int"),
        ("decoder_num_heads", 3, "decoder_num_heads must divide decoder_hidden_dim"),
        ("decoder_mlp_dim", True, "decoder_mlp_dim must be a positive integer"),
        ("norm_pix_loss", "False", "norm_pix_loss must be a bool"),
        ("fixed_position_embedding", 1, "fixed_position_embedding must be a bool"),
        # issue 56: 0 drops nothing and trains nothing; seeds a generator takes; the sincos
        # table's width in the argument's own name
        ("mask_ratio", 0.0, r"mask_ratio must be in \(0, 1\).*drops none"),
        ("seed", -3, r"seed must be None or an int in \[0, 2\*\*32\)"),
        ("seed", 2**40, r"seed must be None or an int in \[0, 2\*\*32\)"),
        ("decoder_hidden_dim", 18, "decoder_hidden_dim must be divisible by 4.*=18"),
        ("hidden_dim", 30, "hidden_dim must be divisible by 4.*hidden_dim=30"),
    ],
)
def test_arguments_are_checked_not_coerced(argument, value, message):
    """Each argument in its own name; nothing truncated (16.7) or read by truthiness ("False")."""
    with pytest.raises(ValueError, match=message):
        build_mae_model("mu/4", image_size=16, **{**TINY, argument: value})


def test_numpy_integers_and_a_decoder_without_blocks_are_accepted():
    model = build_mae_model(
        "mu/4", image_size=16, **{**TINY, "decoder_hidden_dim": np.int64(16)},
        mask_ratio=np.float32(0.5), seed=np.int64(3),
    )  # fmt: skip
    assert type(model.decoder_hidden_dim) is int and model.get_config()["decoder_hidden_dim"] == 16
    assert type(model.mask_ratio) is float and model.get_config()["mask_ratio"] == 0.5
    assert type(model.seed) is int
    linear = build_mae_model("mu/4", image_size=16, **{**TINY, "decoder_num_layers": 0})
    out = linear(_images(2))
    assert linear.decoder_blocks == [] and tuple(out["logits"].shape) == (2, 16, 48)


def test_a_misspelt_argument_gets_a_suggestion():
    with pytest.raises(TypeError, match="'mask_ration': did you mean 'mask_ratio'"):
        build_mae_model("mu/4", image_size=16, mask_ration=0.5, **TINY)


@pytest.fixture(scope="module")
def mae():
    return build_mae_model("mu/4", image_size=16, seed=0, **TINY)


@pytest.mark.parametrize(
    "noise, message",
    [
        (np.zeros((1, 16), "float32"), r"noise must have shape \(2, 16\).*\(1, 16\)"),
        (np.zeros((3, 16), "float32"), r"noise must have shape \(2, 16\).*\(3, 16\)"),
        (np.zeros((2, 15), "float32"), r"noise must have shape \(2, 16\).*\(2, 15\)"),
        (np.full((2, 16), "a"), "noise must be numbers"),
        ([["0.1"] * 16] * 2, "noise must be numbers"),
        (np.zeros((2, 16), bool), "noise must be numbers"),
    ],
)
def test_noise_is_one_row_of_numbers_per_image(mae, noise, message):
    with pytest.raises(ValueError, match=message):
        mae(_images(2), noise=noise)


def test_noise_as_a_list_and_uint8_images_are_taken(mae):
    noise = np.random.default_rng(0).uniform(size=(2, 16))
    expected = mae(_images(2), noise=noise)
    got = mae(_images(2), noise=noise.tolist())
    np.testing.assert_array_equal(to_numpy(got["mask"]), to_numpy(expected["mask"]))
    pixels = np.random.default_rng(1).integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    out = mae(pixels, noise=noise)  # cast as a functional ViT casts (a raw dtype error before)
    np.testing.assert_allclose(
        to_numpy(out["loss"]), to_numpy(mae(pixels.astype("float32"), noise=noise)["loss"])
    )


@pytest.mark.parametrize(
    "options", [dict(num_classes=5), dict(pooling="gap", fc_norm=True, num_classes=3)]
)
def test_from_a_classifier_takes_its_encoder_weights(options):
    """A ViT with a head (or timm's gap + fc_norm head, MAE's fine-tuning form): its trunk's
    weights, the head left out (set_weights failed on the count before); fc_norm becomes the
    encoder's final norm."""
    vit = ViT("mu/4", image_size=16, num_layers=1, **options)
    model = MaskedAutoencoder(vit, fixed_position_embedding=False, **TINY)
    source = {w.path: to_numpy(w) for w in vit.weights}
    for variable in model.encoder.weights:
        path = variable.path
        if path not in source:
            path = path.replace("encoder_norm", "fc_norm")
        np.testing.assert_array_equal(to_numpy(variable), source[path])


def test_from_a_vision_transformer_keeps_its_weights():
    vit = ViT("mu/4", image_size=16, include_top=False, pooling=None, num_layers=1)
    model = MaskedAutoencoder(vit, fixed_position_embedding=False, **TINY)
    for a, b in zip(model.encoder.weights, vit.weights, strict=True):
        np.testing.assert_array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
