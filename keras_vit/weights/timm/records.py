"""The records of `keras_vit.weights.timm.names`: a pattern of timm names, a parsed name.

`TimmNamePattern` is one entry of `names.FAMILIES` (each family folder's `FAMILY_SPECS` rows are
its fields); `TimmArchitecture` is what `names.parse_timm_name` returns. A model family (one
folder of `keras_vit/families/`, a `keras_vit.weights.registry.ModelFamily`) registers one or
more name patterns.
"""

import dataclasses

__all__ = ["Family", "TimmArchitecture", "TimmNamePattern"]


@dataclasses.dataclass(frozen=True)
class TimmNamePattern:
    """A pattern of timm model names and the keras_vit arguments they mean (one row of a model
    family's `timm_specs`; `Family` is its earlier name).

    Attributes:
        name: str. Short name (`"vit"`, `"deit3"`, ...).
        pattern: str. Regex that matches the whole architecture name (no tag), with named
            groups among `size`, `patch`, `res`, `reg`, `quick`, `gap`, `pool`, `arch`.
        example: str. One timm name of the family.
        description: str. What it is, for the README and error messages.
        arguments: callable `(groups) -> dict`: `keras_vit.ViT` arguments, plus the private
            keys `_qkv_bias` and `_patch_bias` (False: the checkpoint has no such biases; our
            model keeps them at zero).
    """

    name: str
    pattern: str
    example: str
    description: str
    arguments: object


@dataclasses.dataclass(frozen=True)
class TimmArchitecture:
    """A parsed timm model name.

    Attributes:
        name: str. The architecture name, without tag or Hub prefix.
        tag: str. The pretrained tag (`"augreg_in21k"`) or "".
        family: `TimmNamePattern`. The pattern the name matched (its `name` is the pattern's,
            not the model family's: `spec.family.name` of a DeiT is `"deit"`, its folder
            `vit`).
        arguments: dict. `keras_vit.ViT` arguments (no `image_size` / `num_classes`
            decisions yet, except DINOv2's 518 px).
        extras: dict. The checkpoint-layout keys of the family's arguments (`layout`,
            `qkv_fused`, `mlp_packed`, `mlp_ratio`: see `keras_vit.families.eva.timm_names`),
            without their leading `_`.
        image_size: int (or `(height, width)`: Sapiens2's 1024 x 768). The resolution the
            name stands for, rounded down to a multiple of
            the patch: timm's 384 px towers with 14 px patches (`vit_so400m_patch14_siglip_384`)
            see 27 x 27 patches, 378 px (their convolution drops the last 6 pixel rows and
            columns), so ours take 378 px images.
        num_classes: int. timm's default class count for the name (0: no head).
        qkv_bias: bool. Whether the checkpoint has q/k/v biases.
        patch_bias: bool. Whether the checkpoint has a patch-embedding bias.
    """

    name: str
    tag: str
    family: TimmNamePattern
    arguments: dict
    image_size: int
    num_classes: int
    qkv_bias: bool
    patch_bias: bool
    extras: dict = dataclasses.field(default_factory=dict)


# The earlier name of `TimmNamePattern` (it is one pattern of names, not a model family).
Family = TimmNamePattern
