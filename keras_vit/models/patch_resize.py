"""`with_patch_size`: the same ViT at another patch size (FlexiViT's PI-resize), as a new model."""

import dataclasses

import keras

from keras_vit.layers._checks import check_bool, check_positive_int_pair
from keras_vit.layers.patch_resize import PATCH_INTERPOLATIONS, resample_patch_embedding
from keras_vit.layers.position_embedding import INTERPOLATIONS
from keras_vit.models.encoder import VisionTransformer, build_model
from keras_vit.models.flexi import FlexiViT, check_not_naflex


def _patch_encoder(model):
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            "with_patch_size needs a model built by keras_vit.ViT (a VisionTransformer, whose "
            f"PatchEncoder it resizes). Received: {type(model).__name__} "
            f"{getattr(model, 'name', '')!r}"
        )
    return model.patch_encoder


def with_patch_size(
    model,
    patch_size,
    *,
    image_size=None,
    interpolation="bilinear",
    antialias=True,
    position_interpolation="bicubic",
):
    """Returns a copy of a ViT at another patch size (and optionally image size).

    The new model has the same architecture except `patch_size` (and `image_size`); its
    patch-embedding kernel is PI-resized (`keras_vit.layers.resample_patch_embedding`, as
    FlexiViT and timm's `resample_patch_embed`), its learned position embedding resampled to the
    new patch grid (`keras_vit.layers.resample_position_embedding`; prefix rows kept), and every
    other weight copied. A `"sincos2d"` table is recomputed for the new grid.

    Enlarging the patch while keeping the grid (e.g. patch 8 at 16 px -> patch 16 at 32 px) is
    exact: the new model on images whose patches were resized with the same resize gives the
    same outputs. A `FlexiViT` resized to one of its patch sizes computes what it computed in
    training at that size.

    Args:
        model: a model built by `keras_vit.ViT` (plain or hybrid; for hybrids the patch size
            applies to the stem's feature map), or a `keras_vit.FlexiViT` (the result is its
            backbone, which takes any image size, at `patch_size`).
        patch_size: int or (height, width). The new patch size; it must divide the image size.
        image_size: optional int or (height, width). The new image size; the model's own when
            None. Defaults to None.
        interpolation: `"bilinear"` (FlexiViT) or `"bicubic"`: the resize the kernel is the
            pseudo-inverse of. Defaults to `"bilinear"`.
        antialias: bool. The kernel resize's antialiasing. Defaults to True.
        position_interpolation: `"bicubic"` (timm's `resample_abs_pos_embed`, antialiased,
            the resampling FlexiViT training uses at every step) or `"linear"` (the official
            loader). Defaults to `"bicubic"`.

    Returns:
        A new functional `keras.Model` with the same name.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=32, num_classes=10)
    >>> small = with_patch_size(model, 4)
    >>> small.input_shape, small.output_shape
    ((None, 32, 32, 3), (None, 10))

    Reference:
        Beyer et al., 2023, "FlexiViT: One Model for All Patch Sizes", Sec. 3.4.
    """
    if interpolation not in PATCH_INTERPOLATIONS:
        raise ValueError(
            f"interpolation must be one of {PATCH_INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    if position_interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"position_interpolation must be one of {INTERPOLATIONS}. "
            f"Received: position_interpolation={position_interpolation!r}"
        )
    source = model.backbone if isinstance(model, FlexiViT) else model
    if not isinstance(source, keras.Model):
        raise ValueError(
            f"with_patch_size needs a keras.Model built by keras_vit.ViT. Received: {model!r}"
        )
    check_not_naflex(source, "with_patch_size")
    check_positive_int_pair(patch_size, "patch_size")
    antialias = check_bool(antialias, "antialias")
    if image_size is not None:
        check_positive_int_pair(image_size, "image_size")
    old_encoder = _patch_encoder(source)
    config = source.config
    changes = {"patch_size": patch_size}
    if image_size is not None:
        changes["image_size"] = image_size
    target = build_model(dataclasses.replace(config, **changes))
    old_layers, new_layers = source.layers, target.layers
    if [type(layer) for layer in old_layers] != [type(layer) for layer in new_layers]:
        raise ValueError(  # a model edited after building (e.g. LoRA-enabled or quantized)
            f"with_patch_size could not rebuild model {model.name!r} from its config; "
            "merge LoRA weights or apply quantization after resizing."
        )
    for old, new in zip(old_layers, new_layers, strict=True):
        if old is old_encoder:
            _copy_patch_encoder(old, new, interpolation, antialias, position_interpolation)
        else:
            new.set_weights(old.get_weights())
    return target


def _copy_patch_encoder(old, new, interpolation, antialias, position_interpolation):
    """Copies `old`'s weights into `new`: kernel PI-resized, position embedding resampled."""
    for source, target in zip(old.weights, new.weights, strict=True):
        if source is old.kernel:
            value = resample_patch_embedding(
                keras.ops.convert_to_numpy(source),
                new.patch_size,
                interpolation=interpolation,
                antialias=antialias,
            )
        elif old.position_embedding == "learned" and source is old.position_embeddings:
            value = old.resampled_position_embedding(
                new.grid_size, interpolation=position_interpolation
            )
        else:
            value = keras.ops.convert_to_numpy(source)
        target.assign(value)
