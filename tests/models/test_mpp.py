"""keras_vit/models/mpp.py (masked patch prediction: loss, model, encoder) and the pretrain-mpp
recipe."""

import json
import os

import keras
import numpy as np
import pytest

from keras_vit.layers import patch_targets
from keras_vit.models import mpp
from keras_vit.models.config import ViTConfig
from tests.helpers import to_numpy


@pytest.mark.parametrize("target", ["color", "downsampled", "pixels"])
def test_loss_ignores_uncorrupted_patches(target):
    rng = np.random.default_rng(2)
    images = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    targets = to_numpy(patch_targets.patch_targets(images, 4, target))
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
    assert np.isfinite(metrics["test_loss"])
    assert metrics["test_loss"] < metrics["initial_test_loss"]
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
