"""NaFlex models: the `VisionTransformer` graph on a NaFlex batch (`ViTConfig(naflex=True)`).

The same roles as a plain ViT (`patch_encoder`, `blocks`, `final_norm`, `pooling`, `head`:
the same layer names, so the weight tables and `set_weights` carry over), with three inputs in
timm's NaFlex convention instead of images:

- `patches` `(B, N, ph * pw * C)` float: each image's patches in (row, column, channel) order;
- `patch_coord` `(B, N, 2)` int: their `(y, x)` positions in the image's own patch grid;
- `patch_valid` `(B, N)` bool: False for padding.

`keras_vit.models.encoder.build_graph` wires them: the patch encoder is a
`keras_vit.layers.NaFlexPatchEncoder` (the plain kernel as a Dense on
flattened patches, the position table resized per image); `patch_valid` masks the keys of
every attention (padding never changes a valid token) and the GAP / MAP pooling. A batch of
one unpadded image gives the plain model's output on that image (same weights, position
embedding without prefix rows).

With `rotary_embedding` (`"eva02"`, `"axial"`, `"mixed"`, `"dinov3"`: the plain models'
variants, timm's `NaFlexVit` with a `rope_type`), the `rotary_embedding` layer is a
`keras_vit.layers.NaFlexRotaryEmbedding` / `NaFlexMixedRotaryEmbedding` computing each token's
sines and cosines from its `patch_coord` and its image's grid.
"""

import keras

from keras_vit.layers.naflex_encoder import NaFlexPatchEncoder


def naflex_inputs(config):
    """The three `keras.Input`s of a NaFlex model, as a dict."""
    ph, pw = config.patch_size
    return {
        "patches": keras.Input((None, ph * pw * config.num_channels), name="patches"),
        "patch_coord": keras.Input((None, 2), dtype="int32", name="patch_coord"),
        "patch_valid": keras.Input((None,), dtype="bool", name="patch_valid"),
    }


def make_naflex_patch_encoder(config, name, dtype=None):
    """The `NaFlexPatchEncoder` of a NaFlex `config` (named `name`: the plain encoder's)."""
    return NaFlexPatchEncoder(
        config.hidden_dim,
        config.patch_size,
        position_embedding_grid=config.grid_size,
        class_token=config.class_token,
        num_register_tokens=config.num_register_tokens,
        position_embedding=config.position_embedding,
        interpolation=config.position_embedding_interpolation,
        antialias=config.position_embedding_antialias,
        align_corners=config.position_embedding_align_corners,
        aspect_preserving=config.position_embedding_aspect_preserving,
        dropout_rate=config.dropout_rate,
        name=name,
        dtype=dtype,
    )
