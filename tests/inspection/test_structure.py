"""keras_vit/inspection/structure.py: the token grid of hybrids, and the checks."""

import keras
import numpy as np
import pytest

from keras_vit import inspection as vi
from keras_vit.layers import PatchEncoder, TransformerBlock
from keras_vit.models.vit import ViT
from tests.inspection.references import np_distance, png_size, random_images, tiny_vit

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


def test_a_masked_autoencoder_is_refused_saying_how():
    """Inspection takes a VisionTransformer; an MAE's encoder is one (issue 56)."""
    from keras_vit.models.mae import build_mae_model

    mae = build_mae_model("mu/4", image_size=16, decoder_hidden_dim=8, decoder_num_layers=0,
                          decoder_num_heads=2, decoder_mlp_dim=8)  # fmt: skip
    with pytest.raises(ValueError, match=r"MaskedAutoencoder.*extract_mae_encoder"):
        vi.model_input_shape(mae)
    with pytest.raises(ValueError, match=r"MaskedAutoencoder.*extract_mae_encoder"):
        vi.attention_maps(mae, np.zeros((1, 16, 16, 3), "float32"))
