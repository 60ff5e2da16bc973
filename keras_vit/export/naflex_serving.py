"""SavedModel signatures of NaFlex models (`keras_vit.export.saved_model` writes them).

`serving_default` takes the NaFlex dict batch (`patches`, `patch_coord`, `patch_valid`);
`serve_bytes` takes encoded images of any size and patchifies them in the graph
(`keras_vit.data.naflex_tf.naflex_example`) under a patch budget, `max_patches`.
"""


def check_max_patches(max_patches, grid_size):
    """`max_patches` of a NaFlex export (default: the position table's grid, `rows * cols`)."""
    if max_patches is None:
        return int(grid_size[0] * grid_size[1])
    if isinstance(max_patches, bool) or not isinstance(max_patches, int) or max_patches < 1:
        raise ValueError(
            f"max_patches must be a positive int (the patch budget of serve_bytes). "
            f"Received: max_patches={max_patches!r}"
        )
    return max_patches


def naflex_config(model):
    """The `ViTConfig` of a NaFlex model, or None for an image model."""
    config = getattr(model, "config", None)
    return config if getattr(config, "naflex", False) else None


def naflex_endpoints(tf, heads, spec):
    """A NaFlex model's signatures: the dict batch, and encoded images patchified in the graph
    (`keras_vit.data.naflex_tf.naflex_example`: decode, scale, aspect-preserving resize under
    `max_patches`, patches + coordinates + validity)."""
    from keras_vit.data.naflex_tf import naflex_example
    from keras_vit.preprocessing import scale_pixels

    (ph, pw), budget, channels = spec["naflex"], spec["max_patches"], spec["num_channels"]

    def serving_default(patches, patch_coord, patch_valid):
        return heads({"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid})

    def patchify(image_bytes):
        image = tf.io.decode_image(
            image_bytes, channels=channels, dtype=tf.uint8, expand_animations=False
        )
        image.set_shape((None, None, channels))
        example = naflex_example(image, (ph, pw), budget, preprocess=scale_pixels)
        return example["patches"], example["patch_coord"], example["patch_valid"]

    def serve_bytes(image_bytes):
        patches, coords, valid = tf.map_fn(
            patchify,
            image_bytes,
            fn_output_signature=(
                tf.TensorSpec((budget, ph * pw * channels), tf.float32),
                tf.TensorSpec((budget, 2), tf.int32),
                tf.TensorSpec((budget,), tf.bool),
            ),
        )
        return heads({"patches": patches, "patch_coord": coords, "patch_valid": valid})

    batch_specs = [
        tf.TensorSpec((None, None, ph * pw * channels), tf.float32, name="patches"),
        tf.TensorSpec((None, None, 2), tf.int32, name="patch_coord"),
        tf.TensorSpec((None, None), tf.bool, name="patch_valid"),
    ]
    return {
        "serving_default": (serving_default, batch_specs),
        "serve_bytes": (serve_bytes, [tf.TensorSpec((None,), tf.string)]),
    }
