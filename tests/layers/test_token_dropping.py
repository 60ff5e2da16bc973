"""TokenDropping: MAE's masking by shuffling (against NumPy), prefix tokens, static shapes,
rotary tables travelling with their tokens, and patch dropout inside a compiled `fit`."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_vit
from keras_vit.layers import MultiHeadSelfAttention, TokenDropping
from keras_vit.layers.rotary import rotary_embedding_2d
from keras_vit.layers.token_dropping import gather_rotary, num_kept


def numpy_masking(patches, noise, rate):
    """transformers' `ViTMAEEmbeddings.random_masking`, in NumPy."""
    n = patches.shape[1]
    keep = int(n * (1 - rate))
    ids_shuffle = np.argsort(noise, axis=1)
    ids_restore = np.argsort(ids_shuffle, axis=1)
    ids_keep = ids_shuffle[:, :keep]
    kept = np.take_along_axis(patches, ids_keep[..., None], axis=1)
    mask = np.ones(noise.shape, "float32")
    mask[:, :keep] = 0
    mask = np.take_along_axis(mask, ids_restore, axis=1)
    return kept, mask, ids_restore, ids_keep


@pytest.mark.parametrize("prefix", [0, 1, 3])
@pytest.mark.parametrize("rate", [0.75, 0.5, 0.3])
def test_masking_equals_numpy_and_keeps_prefix(prefix, rate):
    rng = np.random.default_rng(0)
    tokens = rng.normal(size=(3, prefix + 16, 8)).astype("float32")
    noise = rng.uniform(size=(3, 16)).astype("float32")
    out = TokenDropping(rate, num_prefix_tokens=prefix)(tokens, noise=noise)
    kept, mask, ids_restore, ids_keep = numpy_masking(tokens[:, prefix:], noise, rate)
    got = ops.convert_to_numpy(out["tokens"])
    np.testing.assert_array_equal(got[:, :prefix], tokens[:, :prefix])
    np.testing.assert_array_equal(got[:, prefix:], kept)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["mask"]), mask)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["ids_restore"]), ids_restore)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["ids_keep"]), ids_keep)
    assert mask.sum(axis=1).tolist() == [16 - num_kept(16, rate)] * 3


def test_random_noise_per_image_and_seeded():
    tokens = np.arange(2 * 17 * 4, dtype="float32").reshape(2, 17, 4)
    layer = TokenDropping(0.5, num_prefix_tokens=1, seed=3)
    first = ops.convert_to_numpy(layer(tokens)["mask"])
    again = ops.convert_to_numpy(TokenDropping(0.5, num_prefix_tokens=1, seed=3)(tokens)["mask"])
    np.testing.assert_array_equal(first, again)
    assert first.sum(axis=1).tolist() == [8.0, 8.0]
    assert not np.array_equal(first[0], first[1])  # each image its own draw


def test_training_only_is_the_identity_outside_training():
    tokens = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    layer = TokenDropping(0.5, num_prefix_tokens=1, training_only=True)
    out = layer(tokens, training=False)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["tokens"]), tokens)
    np.testing.assert_array_equal(ops.convert_to_numpy(out["mask"]), np.zeros((2, 4)))
    assert tuple(layer(tokens, training=True)["tokens"].shape) == (2, 3, 8)


def test_static_symbolic_shapes():
    inputs = keras.Input((1 + 16, 8))
    out = TokenDropping(0.75, num_prefix_tokens=1)(inputs)
    assert out["tokens"].shape == (None, 5, 8)
    assert out["ids_keep"].shape == (None, 4) and out["mask"].shape == (None, 16)
    dropout = TokenDropping(0.75, num_prefix_tokens=1, training_only=True)(inputs)
    assert dropout["tokens"].shape == (None, None, 8)


def test_rotary_tables_travel_with_their_tokens():
    """The kept tokens are rotated by their own (original) positions' angles."""
    table = rotary_embedding_2d((4, 4), 8)  # (16, 16)
    rng = np.random.default_rng(2)
    noise = rng.uniform(size=(2, 16)).astype("float32")
    tokens = rng.normal(size=(2, 16, 16)).astype("float32")
    out = TokenDropping(0.75)(tokens, noise=noise, rotary_embedding=table)
    ids = ops.convert_to_numpy(out["ids_keep"])
    gathered = ops.convert_to_numpy(out["rotary_embedding"])
    assert gathered.shape == (2, 4, 1, 16)
    np.testing.assert_array_equal(gathered[:, :, 0], ops.convert_to_numpy(table)[ids])
    # attention rotates queries of the kept tokens exactly as the full grid rotates them there
    attention = MultiHeadSelfAttention(num_heads=2)
    attention.build((None, 16, 16))
    x = rng.normal(size=(2, 16, 2, 8)).astype("float32")
    full = ops.convert_to_numpy(attention._rotate(x, table))
    kept = np.take_along_axis(x, ids[..., None, None], axis=1)
    rotated = ops.convert_to_numpy(attention._rotate(kept, out["rotary_embedding"]))
    np.testing.assert_allclose(
        rotated, np.take_along_axis(full, ids[..., None, None], 1), atol=1e-6
    )
    mixed = rng.normal(size=(16, 2, 16)).astype("float32")
    np.testing.assert_array_equal(ops.convert_to_numpy(gather_rotary(mixed, ids)), mixed[ids])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="rate must be a number in"):
        TokenDropping(1.0)
    with pytest.raises(ValueError, match="rate=0.9 drops every one of the 4 patch tokens"):
        TokenDropping(0.9)(np.zeros((1, 4, 2), "float32"))
    # Refused when the model is made, in the user's word, not at the first training step.
    with pytest.raises(ValueError, match="patch_dropout_rate=0.999 drops every one of the 16"):
        keras_vit.ViT("mu/4", image_size=16, patch_dropout_rate=0.999)
    with pytest.raises(ValueError, match=r"noise must have shape \(1, 4\)"):
        TokenDropping(0.5)(np.zeros((1, 4, 2), "float32"), noise=np.zeros((1, 3), "float32"))
    # One row per image: a (1, 4) noise for two images gave a (1, 4) mask (issue 56).
    with pytest.raises(ValueError, match=r"noise must have shape \(2, 4\).*\(1, 4\)"):
        TokenDropping(0.5)(np.zeros((2, 4, 2), "float32"), noise=np.zeros((1, 4), "float32"))
    with pytest.raises(ValueError, match="seed must be None or an int"):
        TokenDropping(0.5, seed=-3)
    with pytest.raises(ValueError, match="patch_dropout_rate drops patch tokens, but naflex"):
        keras_vit.models.ViTConfig.from_variant(
            "mu/4", image_size=16, naflex=True, pooling="gap", patch_dropout_rate=0.5
        )


def test_layer_round_trip():
    layer = TokenDropping(0.25, num_prefix_tokens=2, training_only=True, seed=1)
    clone = TokenDropping.from_config(layer.get_config())
    assert (clone.rate, clone.num_prefix_tokens, clone.training_only, clone.seed) == (
        0.25,
        2,
        True,
        1,
    )


@pytest.mark.parametrize(
    "rotary",
    [
        None,
        pytest.param("eva02", marks=pytest.mark.slow),
        pytest.param("mixed", marks=pytest.mark.slow),
    ],
)
def test_patch_dropout_trains_compiled_and_is_off_at_inference(rotary):
    options = {} if rotary is None else dict(rotary_embedding=rotary, pooling="gap")
    tiny = dict(image_size=16, num_classes=3, num_layers=1, hidden_dim=16, num_heads=2, **options)
    model = keras_vit.ViT("mu/4", patch_dropout_rate=0.5, **tiny)
    images = np.random.default_rng(0).uniform(size=(4, 16, 16, 3)).astype("float32")
    reference = keras_vit.ViT("mu/4", **tiny)
    reference.set_weights(model.get_weights())
    np.testing.assert_allclose(
        ops.convert_to_numpy(model(images, training=False)),
        ops.convert_to_numpy(reference(images, training=False)),
        atol=1e-6,
    )
    # in training the blocks see 1 + 8 tokens (8 without a class token) of 1 + 16
    dropped = model.get_layer("patch_dropout")(model.patch_encoder(images), training=True)
    assert tuple(dropped["tokens"].shape)[1] == 8 + int(rotary is None)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=keras.backend.backend() != "torch",
    )
    history = model.fit(images, np.arange(4) % 3, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_masked_patch_prediction_refuses_patch_dropout():
    from keras_vit.models import build_mpp_model

    with pytest.raises(ValueError, match="patch_dropout_rate=0.5"):
        build_mpp_model("mu/4", image_size=16, patch_dropout_rate=0.5)
