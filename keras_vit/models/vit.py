"""`ViT(...)`: the Vision Transformer builder (plain and hybrid) and the named ones.

`ViT` turns its arguments into one `keras_vit.models.config.ViTConfig` and builds it with
`keras_vit.models.encoder.build_model` (a `VisionTransformer`); hybrid codes only change the
stem. Preset names in `weights=` are resolved through `keras_vit.models.pretrained`.
"""

import inspect

from keras_vit.models import pretrained, variants
from keras_vit.models.arguments import check_size_arguments, nearest_keys
from keras_vit.models.config import GROUPS, HYBRID_KWARGS, ViTConfig, override_defaults
from keras_vit.models.config_docs import args_section
from keras_vit.models.encoder import build_model

__all__ = [
    "ViT",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTH14",
    "ViTL16",
    "ViTL32",
    "ViTS16",
    "ViTS32",
    "ViTTi16",
    "named_builder",
]


# ViT's options: every ViTConfig field but the hybrid ones (its `**hybrid_kwargs`), with the
# default `ViTConfig.from_variant` gives it. Declared there, once; ViT's signature shows them.
_OPTIONS = override_defaults(*(group for group in GROUPS if group != "hybrid"))


def ViT(variant="B/16", *, weights=None, **options):
    # The docstring and the signature are generated below, from ViTConfig's fields and docs.
    unknown = sorted(set(options) - set(ViTConfig.argument_names()))
    if unknown:
        valid = [*ViTConfig.field_names(), "variant", "weights"]
        raise TypeError(
            f"ViT() got unexpected keyword arguments {unknown}{nearest_keys(unknown, valid)}. "
            f"Hybrid arguments are {list(HYBRID_KWARGS)}."
        )
    arguments = {**_OPTIONS, **options}
    check_size_arguments(
        image_size=arguments["image_size"],
        num_classes=arguments["num_classes"],
        patch_size=arguments["patch_size"],
    )
    weights, arguments = pretrained.resolve_arguments(variant, weights, arguments)
    config = ViTConfig.from_variant(variant, **arguments)
    return build_model(config, weights)


_SIZES = ("num_layers", "hidden_dim", "mlp_dim", "num_heads", "patch_size")
_OWN = ("image_size", "num_classes", "name", *_SIZES)  # None: the variant's or the preset's
_VIT_DOC = """Builds a (plain or hybrid) Vision Transformer, a `VisionTransformer` model.

    Every argument but `variant` and `weights` is a field of `keras_vit.models.ViTConfig`,
    declared, defaulted and documented there once (this signature and the entries below are
    generated from it); an unknown one is a `TypeError` naming the nearest.

    Args:
        variant: str. Size and patch code: `"Ti/16"`, `"S/16"`, `"S/32"`,
            `"B/8"`, `"B/16"`, `"B/32"`, `"L/16"`, `"L/32"`, `"H/14"` (any
            size with any patch works, plus `"mu"` for tests), or a hybrid
            code `"R{{depth}}+SIZE/STRIDE"`: `"R50+B/16"`, `"R50+L/32"`,
            `"R26+S/32"`, `"R26+B/32"`, `"R+Ti/16"` (official, see
            `keras_vit.models.variants.OFFICIAL_HYBRIDS`) or e.g. `"R26+B/64"`;
            a plain code with `resnet_units` or `backbone` also makes a hybrid.
            Defaults to `"B/16"`.
        weights: None, a preset name for this variant (`"imagenet21k"`,
            `"imagenet21k+imagenet2012"`, `"augreg_in21k"`,
            `"augreg_in21k_ft_in1k"`, ...; see `keras_vit.list_presets(variant)`),
            or a path to an official `.npz` checkpoint or a `.weights.h5` file.
            A preset is downloaded once into the Keras cache (base URL from
            `$KERAS_VIT_WEIGHTS_URL`) and loaded strictly; the model takes the
            preset's image size and class count unless given. Given another
            class count, the head is new (zeros) and `pre_logits` is dropped
            unless `representation_size` is set; with the preset's own class
            count, an ImageNet-21k original keeps its `pre_logits`. Given
            another image size, the position embedding is resampled.
            Defaults to None.
        image_size: int or (height, width). Input size in pixels. Defaults to
            224, or the resolution of the preset named by `weights`.
        num_classes: int. Classifier outputs (with `include_top`). Defaults to
            1000, or the class count of the preset named by `weights`.
        num_layers, hidden_dim, mlp_dim, num_heads, patch_size: override the
            variant's numbers (None: the variant's).
        name: optional model name; defaults to e.g. `"vit_b16"`.
{options}
        **hybrid_kwargs: the stem of a hybrid (Sec. 3.1, Hybrid Architecture):
{hybrid}

    Returns:
        A `keras_vit.models.VisionTransformer` (a functional `keras.Model`) taking
        `(B, H, W, C)` images in [-1, 1] (see `keras_vit.preprocess_input`); its
        parts by role: `model.patch_encoder`, `model.blocks`, `model.head`, ...;
        ResNet layers are named like the official checkpoint (`conv_root`,
        `gn_root`, `block1_unit1_conv1`, ...).

    Example:

    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> model.output_shape
    (None, 10)
    >>> hybrid = ViT("mu/1", resnet_units=(1, 1), resnet_width=8,
    ...     resnet_groups=4, image_size=32, num_classes=10)
    >>> hybrid.patch_encoder.grid_size
    (4, 4)

    Reference:
        Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words", Sec. 3.1.
    """
ViT.__doc__ = _VIT_DOC.format(
    options=args_section(8, leave_out=(*_OWN, *HYBRID_KWARGS)),
    hybrid=args_section(12, only=HYBRID_KWARGS),
)
_KINDS = inspect.Parameter
ViT.__signature__ = inspect.Signature(
    [
        _KINDS("variant", _KINDS.POSITIONAL_OR_KEYWORD, default="B/16"),
        _KINDS("weights", _KINDS.KEYWORD_ONLY, default=None),
        *(_KINDS(name, _KINDS.KEYWORD_ONLY, default=value) for name, value in _OPTIONS.items()),
        _KINDS("hybrid_kwargs", _KINDS.VAR_KEYWORD),
    ]
)


_BUILDER_DOC = (
    "Builds ViT-{code} ({layers} layers, hidden {hidden}, MLP {mlp}, {heads} heads{extra}).\n"
    """
    A one-line wrapper of `keras_vit.ViT("{code}", **kwargs)`; every argument of
    `ViT` except `variant` is accepted (`image_size`, `num_classes`,
    `include_top`, `weights`, `pooling`, `representation_size`,
    `classifier_activation`, dropout rates, size overrides, ...).

    Returns:
        A `VisionTransformer` named `"{name}"`.

    Example:

    >>> model = {fn}(image_size={demo_size}, num_layers=1, include_top=False,
    ...     pooling="gap")  # doctest: +SKIP

    Reference:
        Dosovitskiy et al., 2021, Table 1{ref}.
    """
)


def named_builder(code, module=__name__):
    """The one-line builder `fn(**kwargs) -> ViT(code, **kwargs)`, named and documented.

    `named_builder("B/16")` is `ViTB16`: the name is `"ViT"` + the code without `/` and `+`.

    Args:
        code: str. The variant code, e.g. `"B/16"` or `"R50+B/16"`.
        module: str. The module the builder is listed in. Defaults to this one.

    Returns:
        A function taking every argument of `ViT` except `variant`.
    """

    def builder(**kwargs):
        return ViT(code, **kwargs)

    builder.__signature__ = ViT.__signature__.replace(
        parameters=list(ViT.__signature__.parameters.values())[1:]
    )

    config = variants.parse_variant(code)
    hybrid = "resnet_units" in config
    builder.__name__ = builder.__qualname__ = "ViT" + code.replace("/", "").replace("+", "")
    builder.__module__ = module
    builder.__doc__ = _BUILDER_DOC.format(
        code=code,
        fn=builder.__name__,
        name=variants.model_name(code),
        layers=config["num_layers"],
        hidden=config["hidden_dim"],
        mlp=config["mlp_dim"],
        heads=config["num_heads"],
        extra=f", BiT ResNet stem {config['resnet_units']}" if hybrid else "",
        demo_size=64 if hybrid else 32,
        ref=" and Sec. 3.1 (Hybrid Architecture)" if hybrid else "",
    )
    return builder


ViTTi16 = named_builder("Ti/16")
ViTS16 = named_builder("S/16")
ViTS32 = named_builder("S/32")
ViTB8 = named_builder("B/8")
ViTB16 = named_builder("B/16")
ViTB32 = named_builder("B/32")
ViTL16 = named_builder("L/16")
ViTL32 = named_builder("L/32")
ViTH14 = named_builder("H/14")
