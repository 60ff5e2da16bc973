"""timm's NaFlex ViTs (`NaFlexVit`, `naflexvit_*`) -> keras_vit NaFlex models: names and weights.

`keras_vit.weights.timm.names` reads timm's `naflexvit_*` names (ViT-B/16 with GAP,
aspect-preserving and factorised position embeddings, MAP, SO150M2, and the SigLIP 2 NaFlex
towers) into `ViT(..., naflex=True)` arguments; `naflex_name_table` maps `NaFlexVit`'s state dict
(`embeds.*`: the patch projection as a `Linear` on (row, column, channel)-flattened patches,
`pos_embed` `(1, h, w, D)` or `pos_embed_y` / `pos_embed_x`, `cls_token`, `reg_token`; the
blocks, norms, `attn_pool` and head as timm's `VisionTransformer`) to our variables. timm's
C-RADIO NaFlex backbones (`naflexvit_*_radio_*`, `keras_vit.families.radio.timm_names`) add a
class token to the registers and a 128 x 128 table.
"""

from keras_vit.models.variable_paths import PATHS, patch_encoder
from keras_vit.weights import loading as L

# timm's `embeds.proj` Linear `(D, ph * pw * C)` -> our kernel `(ph, pw, C, D)`.
PATCH_KERNEL = L.Transform(
    "naflex_patch",
    lambda shapes: (shapes[0][3], shapes[0][0] * shapes[0][1] * shapes[0][2]),
    lambda a, shapes: (a.T.reshape(shapes[0]),),
)


def _grid_table(array, shapes):
    """`(1, h, w, D)` -> `(1, h * w, D)` (the model's grid: NaFlex resizes at run time)."""
    expected = shapes[0]
    if array.ndim != 4 or array.shape[1] * array.shape[2] != expected[1]:
        raise L.Mismatch(
            f"found {L.shape_of(array)}: a (1, h, w, D) table of another grid than the "
            f"model's {expected[1]} positions (pass image_size = table grid x patch size)"
        )
    return (array.reshape(expected),)


_GRID = L.Transform(
    "naflex_position_grid", lambda shapes: ("1, h, w", shapes[0][2]), _grid_table, exact=False
)


def naflex_name_table(config, table):
    """timm `NaFlexVit` keys for a NaFlex `config`, from the plain table of the same model.

    Args:
        config: a NaFlex `ViTConfig`.
        table: `keras_vit.weights.timm.reader.timm_name_table` of `config` without NaFlex (blocks,
            norms, MAP head and head are named alike).

    Returns:
        dict `{timm key: (path, transform)}`.
    """
    p, out = PATHS, {}
    if config.class_token:
        out["embeds.cls_token"] = (p["class_token"], L.IDENTITY)
    if config.num_register_tokens:
        out["embeds.reg_token"] = (p["register_tokens"], L.IDENTITY)
    out["embeds.proj.weight"] = (p["patch_kernel"], PATCH_KERNEL)
    out["embeds.proj.bias"] = (p["patch_bias"], L.IDENTITY)
    if config.position_embedding == "learned":
        out["embeds.pos_embed"] = (p["position_embedding"], _GRID)
    elif config.position_embedding == "factorized":
        out["embeds.pos_embed_y"] = (patch_encoder("position_embeddings_y"), L.IDENTITY)
        out["embeds.pos_embed_x"] = (patch_encoder("position_embeddings_x"), L.IDENTITY)
    skip = ("cls_token", "reg_token", "pos_embed", "patch_embed.proj.weight")
    skip += ("patch_embed.proj.bias",)
    out.update({k: v for k, v in table.items() if k not in skip})
    return out
