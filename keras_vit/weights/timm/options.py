"""timm `VisionTransformer` options in the timm name table (`keras_vit.weights.timm.reader`).

Shared checkpoint transforms of timm's layouts: a packed SwiGLU `fc1` (`PACKED_WEIGHT`,
`PACKED_BIAS`), rotate-half RoPE channels reordered to ours (`interleave_halves`), the
attention's inner norm (`inner_norm`); and the options AIMv2 introduced:

`timm.py`'s table covers timm's LayerNorm ViTs; `adapt_name_table` turns it into the table of a
model with the options AIMv2 (`keras_vit.families.aimv2.timm_names`) adds: timm's unpacked
`SwiGLU` (`mlp.fc1_g`, `mlp.fc1_x` instead of a packed `mlp.fc1`), no attention-projection or
MLP biases (`proj_bias=False`: `proj_fills` gives ours zeros), the patch-embedding norm
(`patch_embed.norm` -> `patch_encoder/patch_norm`) and RMSNorm (`weight` -> `scale`, no bias).
"""

import re

import numpy as np

from keras_vit.models.variable_paths import block, patch_encoder
from keras_vit.weights import loading as L


def _halves(transform):
    """A packed SwiGLU `fc1` (gate rows first, then up rows) -> the gate and up targets."""
    return L.Transform(
        f"packed_{transform.name}",
        lambda shapes: (
            2 * transform.source_shape(shapes[:1])[0],
            *transform.source_shape(shapes[:1])[1:],
        ),  # fmt: skip
        lambda a, shapes: tuple(
            transform.apply(part, (shape,))[0]
            for part, shape in zip(np.split(a, 2), shapes, strict=True)
        ),
    )


PACKED_WEIGHT = _halves(L.LINEAR)
PACKED_BIAS = _halves(L.IDENTITY)


def interleave_halves(transform, rotated):
    """`transform`, then each head's channels `(0, d/2, 1, d/2 + 1, ...)` in the `rotated` targets.

    DINOv3 (timm's `rope_rotate_half=True`, transformers' `DINOv3ViTModel`) rotates channel
    `i` of a query / key head with channel `i + d/2`; keras_vit's rotary attention rotates the
    interleaved pairs `(2i, 2i + 1)`. Reordering the query and key channels of every head alike
    turns one into the other and leaves `q . k` (the attention) unchanged. `rotated`: one bool
    per target (the fused q/k/v: query and key yes, value no).
    """

    def apply(a, shapes):
        parts = transform.apply(a, shapes)
        return tuple(_interleave(p) if r else p for p, r in zip(parts, rotated, strict=True))

    return L.Transform(
        f"interleaved_{transform.name}", transform.source_shape, apply, transform.exact
    )


def _interleave(x):
    half = x.shape[-1] // 2
    order = np.arange(2 * half).reshape(2, half).T.reshape(-1)
    return x[..., order]


def inner_norm(key, attention):
    """timm's `attn.norm` over the concatenated heads (EVA-CLIP's `scale_attn_inner`, BEiT-3's
    `scale_attn_norm`) -> the `inner_norm` of our `attention`."""
    return {
        f"{key}.{suffix}": (f"{attention}/inner_norm/{variable}", L.HEADS_IN_BIAS)
        for suffix, variable in (("weight", "gamma"), ("bias", "beta"))
    }


_PROJ_BIAS = re.compile(r"blocks\.\d+\.(attn\.proj|mlp\.fc[12]\w*)\.bias")
# Our GroupNorms (the hybrids' ResNet stem) stay GroupNorms whatever `norm` says.
_GROUP_NORM = re.compile(r"(gn_root|block\d+_unit\d+_gn\w+)/(gamma|beta)")


def _unpacked(key, entry):
    """A packed SwiGLU `fc1` entry -> timm's `fc1_g` (gate) and `fc1_x` (up) entries."""
    (gate, up), suffix = entry[0], key.rsplit(".", 1)[1]
    transform = L.LINEAR if suffix == "weight" else L.IDENTITY
    stem = key[: -len(f"fc1.{suffix}")]
    return {f"{stem}fc1_g.{suffix}": (gate, transform), f"{stem}fc1_x.{suffix}": (up, transform)}


def _rms(table):
    """LayerNorm entries (`weight` -> `gamma`, `bias` -> `beta`) as RMSNorm's (`scale` only)."""
    out = {}
    for key, (path, transform) in table.items():
        if isinstance(path, str) and not _GROUP_NORM.fullmatch(path):
            if path.endswith("/beta"):
                continue
            if path.endswith("/gamma"):
                path = path[: -len("gamma")] + "scale"
        out[key] = (path, transform)
    return out


def adapt_name_table(table, config, extras, patch_bias=True):
    """`table` (timm.py's, in timm's order) for `config`'s AIMv2 options.

    `extras`: the checkpoint layout (`TimmArchitecture.extras`: `mlp_packed`, `proj_bias`);
    `patch_bias`: whether the checkpoint has a patch-embedding bias.
    """
    unpacked = config.mlp == "swiglu" and not extras.get("mlp_packed", True)
    proj_bias = extras.get("proj_bias", True)
    out = {}
    for key, entry in table.items():
        if not proj_bias and _PROJ_BIAS.fullmatch(key):
            continue
        if unpacked and re.fullmatch(r"blocks\.\d+\.mlp\.fc1\.(weight|bias)", key):
            out.update(_unpacked(key, entry))
            continue
        out[key] = entry
        last_patch = "patch_embed.proj.bias" if patch_bias else "patch_embed.proj.weight"
        if key == last_patch and getattr(config, "patch_norm", False):
            out.update(L.torch_norm("patch_embed.norm", patch_encoder("patch_norm")))
    return _rms(out) if getattr(config, "norm", "layernorm") == "rmsnorm" else out


def proj_fills(config, spec):
    """Zeros for our attention-output and MLP biases when the checkpoint has none."""
    if spec.extras.get("proj_bias", True):
        return {}
    mlps = ("mlp/gate_dense", "mlp/up_dense", "mlp/down_dense")
    if config.mlp != "swiglu":
        mlps = ("mlp_dense_1", "mlp_dense_2")
    return {
        block(i, name, "bias"): 0.0
        for i in range(config.num_layers)
        for name in ("attention/attention_output", *mlps)
    }
