"""keras_vit/models/naflex.py: NaFlex models (dict inputs, per-image grids, padding masks)."""

import dataclasses

import keras
import numpy as np
import pytest

from keras_vit.data import naflex_batch
from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model
from tests.helpers import roundtrip_model, to_numpy

RNG = np.random.default_rng(0)
IMAGES = [RNG.normal(size=(16, 40, 3)), RNG.normal(size=(40, 16, 3)), RNG.normal(size=(24, 24, 3))]


def _config(**kwargs):
    options = dict(image_size=24, num_layers=1, num_classes=5, naflex=True)
    return ViTConfig.from_variant("mu/8", **{**options, **kwargs})


def _perturbed(model, seed=1):
    rng = np.random.default_rng(seed)
    model.set_weights(
        [w + rng.normal(0, 0.2, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


def _run(model, batch):
    """One compiled forward pass (JAX's eager op-by-op calls are slow on many shapes)."""
    return to_numpy(model.predict_on_batch(batch))


POOLINGS = {
    "token": dict(pooling="token", num_register_tokens=1),
    "gap": dict(pooling="gap", fc_norm=True, num_register_tokens=2),
    "map": dict(pooling="map", layer_scale_init_value=0.1),
}


@pytest.fixture(scope="module", params=list(POOLINGS))
def models(request):
    """A NaFlex model and the plain model with its weights (no prefix position rows)."""
    naflex = _perturbed(build_model(_config(**POOLINGS[request.param])))
    plain_config = dataclasses.replace(naflex.config, naflex=False)
    plain = build_model(plain_config)
    plain.set_weights(naflex.get_weights())
    return naflex, plain


def test_one_unpadded_image_equals_the_plain_model(models):
    naflex, plain = models
    image = RNG.normal(size=(24, 24, 3)).astype("float32")
    batch = naflex_batch([image], 8, 9)
    assert batch["patch_valid"].all()
    expected = _run(plain, image[None])
    np.testing.assert_allclose(_run(naflex, batch), expected, rtol=1e-5, atol=1e-5)


def test_padding_never_changes_valid_outputs(models):
    """Each image of a mixed batch gives what it gives alone; padding content is irrelevant."""
    naflex, _ = models
    batch = naflex_batch(IMAGES, 8, 14)
    mixed = _run(naflex, batch)
    for i, image in enumerate(IMAGES):
        alone = naflex_batch([image], 8, 14)
        n = int(alone["patch_valid"].sum())
        trimmed = {k: v[:, :n] for k, v in alone.items()}
        np.testing.assert_allclose(mixed[i], _run(naflex, trimmed)[0], rtol=1e-5, atol=1e-5)
    noisy = dict(batch)
    noisy["patches"] = np.where(batch["patch_valid"][..., None], batch["patches"], 50.0)
    noisy["patch_coord"] = np.where(batch["patch_valid"][..., None], batch["patch_coord"], 3)
    np.testing.assert_allclose(_run(naflex, noisy), mixed, rtol=1e-5, atol=1e-5)


def test_grids_are_per_image():
    """A 2 x 2 image beside a 5 x 5 one gets its own resized table (what it gets alone)."""
    model = _perturbed(build_model(_config(pooling="gap", num_classes=0, include_top=False)))
    small = naflex_batch([RNG.normal(size=(16, 16, 3))], 8, 4)
    large = naflex_batch([RNG.normal(size=(40, 40, 3))], 8, 25)
    padded = {k: np.zeros_like(v, shape=(1, 25) + v.shape[2:]) for k, v in small.items()}
    for k, v in small.items():
        padded[k][:, :4] = v
    both = {k: np.concatenate([padded[k], large[k]]) for k in small}
    out = _run(model, both)
    np.testing.assert_allclose(out[0], _run(model, small)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], _run(model, large)[0], rtol=1e-5, atol=1e-5)


def test_save_load_and_fit(tmp_path):
    model = build_model(
        _config(
            pooling="gap",
            position_embedding="factorized",
            position_embedding_aspect_preserving=True,
        )
    )
    batch = naflex_batch(IMAGES, 8, 12)
    loaded = roundtrip_model(model, batch, tmp_path)
    assert loaded.config == model.config
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(keras.optimizers.SGD(0.1), loss)
    history = model.fit(batch, np.array([0, 1, 2]), epochs=2, batch_size=3, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[1] < losses[0]


def test_roles():
    model = build_model(_config(pooling="map"))
    assert type(model.patch_encoder).__name__ == "NaFlexPatchEncoder"
    assert model.stem is None and len(model.blocks) == 1 and model.pooling.name == "pooling"
    assert sorted(model.input) == ["patch_coord", "patch_valid", "patches"]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(naflex=False, position_embedding="factorized"), "only apply to NaFlex models"),
        (dict(naflex=False, position_embedding_antialias=False), "only apply to NaFlex"),
        (dict(position_embedding="sincos2d"), "naflex=True takes patch sequences"),
        (dict(dynamic_image_size=True), "dynamic_image_size=True"),
        (dict(position_embedding_align_corners=True), "needs position_embedding_antialias"),
        (dict(position_embedding_interpolation="area"), "'bicubic' or 'bilinear'"),
    ],
)
def test_bad_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _config(**kwargs)


def test_prefix_position_rows_are_dropped():
    assert _config(pooling="token").prefix_position_embedding is False


# --- rotary position embeddings (per-token tables from patch_coord) ----------------------------
# (Every kind's per-token table is checked against the plain one in
# tests/layers/test_naflex_rotary.py, and against timm in
# tests/families/naflex/test_timm_naflex_rope.py.)
ROTARY = {
    "eva02": dict(rotary_reference_grid=4, rotary_grid_offset=0.5),
    "mixed": dict(rotary_temperature=10.0),
}


def test_rotary_one_unpadded_image_equals_the_plain_model():
    """One unpadded non-square image, same weights, as the plain rotary model."""
    image = RNG.normal(size=(16, 24, 3)).astype("float32")
    batch = naflex_batch([image], 8, 6)
    assert batch["patch_valid"].all()
    for kind, options in ROTARY.items():
        config = _config(image_size=(16, 24), pooling="gap", rotary_embedding=kind, **options)
        naflex = _perturbed(build_model(config))
        plain = build_model(dataclasses.replace(naflex.config, naflex=False))
        plain.set_weights(naflex.get_weights())
        expected = _run(plain, image[None])
        got = _run(naflex, batch)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=kind)


def test_rotary_padding_is_harmless_and_saves(tmp_path):
    """Padding coordinates and pixels never change valid outputs; `.keras` round trip."""
    model = _perturbed(build_model(_config(pooling="map", rotary_embedding="mixed")))
    assert type(model.rotary_embedding).__name__ == "NaFlexMixedRotaryEmbedding"
    batch = naflex_batch(IMAGES, 8, 14)
    mixed = _run(model, batch)
    noisy = dict(batch)
    noisy["patches"] = np.where(batch["patch_valid"][..., None], batch["patches"], 50.0)
    noisy["patch_coord"] = np.where(batch["patch_valid"][..., None], batch["patch_coord"], 9)
    np.testing.assert_allclose(_run(model, noisy), mixed, rtol=1e-5, atol=1e-5)
    model.save(tmp_path / "rope.keras")  # (compiled calls: JAX's eager ones are slow here)
    loaded = keras.saving.load_model(tmp_path / "rope.keras")
    assert loaded.config == model.config
    np.testing.assert_array_equal(_run(loaded, batch), mixed)
