"""Tiny timm models for the tests of keras_vit/weights/timm.py, and a NumPy forward of timm's ViT.

`CASES` names one tiny model per family keras_vit reads today: how timm builds it (`timm_model`,
timm needed), what `from_timm` is given, and its architecture for the NumPy reference
`np_timm_forward`, written from timm's `VisionTransformer` / `ResNetV2` code, independently of
keras_vit's loader. `data/timm_keys.json` holds the state-dict names and shapes timm gives these
models, so the tests check the weight names without timm (which does not install beside the
CPU build of PyTorch the project uses: see README). Regenerate it where timm is installed:

    python -m tests.weights.timm_cases tests/weights/data/timm_keys.json
"""

import json
import math
import os
import sys

import numpy as np
from scipy.special import erf

from tests.helpers import np_conv_same, same_pads

KEYS_FILE = os.path.join(os.path.dirname(__file__), "data", "timm_keys.json")
SMALL = dict(depth=2, embed_dim=32, num_heads=2)  # timm's names for our tiny sizes
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2, mlp_dim=128)

# id: timm name, timm.create_model overrides, from_timm overrides, reference architecture.
CASES = {
    "vit": (
        "vit_base_patch16_224.augreg_in21k",
        dict(img_size=48, num_classes=5, **SMALL),
        dict(image_size=48, **OURS),
        dict(pool="token", patch=16),
    ),
    "deit": (
        "deit_tiny_patch16_224.fb_in1k",
        dict(img_size=32, num_classes=3, **SMALL),
        dict(image_size=32, **OURS),
        dict(pool="token", patch=16),
    ),
    "vit_gap": (
        "vit_medium_patch16_gap_256",
        dict(img_size=48, num_classes=4, **SMALL),
        dict(image_size=48, **OURS),
        dict(pool="gap", class_token=False, qkv_bias=False, layer_scale=True, patch=16),
    ),
    "dinov2": (
        "vit_small_patch14_dinov2.lvd142m",
        dict(img_size=42, **SMALL),
        dict(image_size=42, **OURS),
        dict(pool="token", layer_scale=True, patch=14, head=False),
    ),
    "siglip_gap": (
        "vit_base_patch32_siglip_gap_256",
        dict(img_size=64, num_classes=3, **SMALL),
        dict(image_size=64, **OURS),
        dict(pool="gap", class_token=False, tanh_gelu=True, patch=32),
    ),
    "hybrid": (
        "vit_small_r26_s32_224",
        dict(img_size=32, num_classes=5, depth=1, embed_dim=32, num_heads=2),
        dict(image_size=32, resnet_units=(1, 1), resnet_width=8, resnet_groups=4,
             num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=128),
        dict(pool="token", patch=1, stem=(1, 1), groups=4),
    ),
    "hybrid_root": (
        "vit_tiny_r_s16_p8_384",
        dict(img_size=64, num_classes=2, depth=1, embed_dim=32, num_heads=2),
        dict(image_size=64, num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=128),
        dict(pool="token", patch=8, stem=(), groups=32),
    ),
}  # fmt: skip


def timm_model(case):
    """The tiny timm model of a case, in eval mode (needs timm)."""
    import functools

    import timm
    from timm.layers import GroupNormAct, HybridEmbed, StdConv2dSame
    from timm.models.resnetv2 import ResNetV2
    from timm.models.vision_transformer import VisionTransformer

    name, overrides, _, arch = CASES[case]
    if case == "hybrid":  # timm's R26 hybrid, with a 2-stage ResNetV2 of width 8 and 4 groups
        backbone = ResNetV2(
            layers=arch["stem"],
            channels=(32, 64),
            stem_chs=8,
            num_classes=0,
            global_pool="",
            preact=False,
            stem_type="same",
            conv_layer=functools.partial(StdConv2dSame, eps=1e-8),
            norm_layer=functools.partial(GroupNormAct, num_groups=arch["groups"]),
        )
        embed = functools.partial(HybridEmbed, backbone=backbone)
        model = VisionTransformer(patch_size=1, embed_layer=embed, **overrides)
    else:
        model = timm.create_model(name.partition(".")[0], pretrained=False, **overrides)
    return model.eval()


def perturb(model, seed=0):
    """Every parameter random (norm and LayerScale weights around 1, all biases non-zero)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * 0.2
            around_one = parameter.ndim == 1 and ("norm" in name or ".ls" in name)
            parameter.copy_(noise + 1.0 if around_one else noise)
    return model


def random_state_dict(case, seed=0):
    """NumPy arrays of the case's timm names and shapes (`data/timm_keys.json`)."""
    with open(KEYS_FILE) as f:
        shapes = json.load(f)[case]
    rng = np.random.default_rng(seed)
    arrays = {}
    for key, shape in shapes.items():
        value = rng.normal(0.0, 0.2, shape).astype("float32")
        if len(shape) == 1 and ("norm" in key or ".ls" in key):
            value += 1.0
        arrays[key] = value
    return arrays


# --- NumPy forward of timm's VisionTransformer (eval mode) -------------------------------------


def _layer_norm(x, a, key, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * a[f"{key}.weight"] + a[f"{key}.bias"]


def _linear(x, a, key):
    y = x @ a[f"{key}.weight"].T
    return y + a[f"{key}.bias"] if f"{key}.bias" in a else y


def _gelu(x, tanh):
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _attention(x, a, key, heads):
    b, n, d = x.shape
    qkv = _linear(x, a, f"{key}.qkv").reshape(b, n, 3, heads, d // heads).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv
    logits = q @ k.transpose(0, 1, 3, 2) * (d // heads) ** -0.5
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return _linear(out, a, f"{key}.proj")


def _std_conv(x, weight, stride, eps=1e-8):
    """timm's StdConv2dSame: batch-norm of the (out, in*kh*kw) kernel, TF SAME padding."""
    w = weight.reshape(weight.shape[0], -1)
    w = (w - w.mean(1, keepdims=True)) / np.sqrt(w.var(1, keepdims=True) + eps)
    return np_conv_same(x, w.reshape(weight.shape).transpose(2, 3, 1, 0), stride)


def _group_norm(x, a, key, groups, relu, eps=1e-5):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean((1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean((1, 2, 4), keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(b, h, w, c) * a[f"{key}.weight"] + a[
        f"{key}.bias"
    ]
    return np.maximum(y, 0) if relu else y


def _max_pool_same(x):
    b, h, w, c = x.shape
    top, bottom, oh = same_pads(h, 3, 2)
    left, right, ow = same_pads(w, 3, 2)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    rows, columns = slice(None, 2 * oh, 2), slice(None, 2 * ow, 2)
    windows = [padded[:, i:][:, rows, j:][:, :, columns] for i in range(3) for j in range(3)]
    return np.max(windows, axis=0)


def _resnet(x, a, units, groups):
    root = "patch_embed.backbone" + (".stem" if units else "")
    x = _std_conv(x, a[f"{root}.conv.weight"], 2)
    x = _max_pool_same(_group_norm(x, a, f"{root}.norm", groups, relu=True))
    for s, count in enumerate(units):
        for u in range(count):
            key = f"patch_embed.backbone.stages.{s}.blocks.{u}"
            stride = 2 if s > 0 and u == 0 else 1
            shortcut = x
            if f"{key}.downsample.conv.weight" in a:
                shortcut = _std_conv(x, a[f"{key}.downsample.conv.weight"], stride)
                shortcut = _group_norm(shortcut, a, f"{key}.downsample.norm", groups, relu=False)
            y = _group_norm(_std_conv(x, a[f"{key}.conv1.weight"], 1), a, f"{key}.norm1",
                            groups, relu=True)  # fmt: skip
            y = _group_norm(_std_conv(y, a[f"{key}.conv2.weight"], stride), a, f"{key}.norm2",
                            groups, relu=True)  # fmt: skip
            y = _group_norm(_std_conv(y, a[f"{key}.conv3.weight"], 1), a, f"{key}.norm3",
                            groups, relu=False)  # fmt: skip
            x = np.maximum(y + shortcut, 0)
    return x


def np_timm_forward(arrays, arch, images, features=False):
    """timm's ViT forward (eval) on a timm state dict, NHWC images, float64 NumPy.

    Returns the logits, or the pooled features with `features=True` (or without a head).
    """
    a = {k: np.asarray(v, "float64") for k, v in arrays.items()}
    eps = arch.get("eps", 1e-6)
    x = np.asarray(images, "float64")
    if "stem" in arch:
        x = _resnet(x, a, arch["stem"], arch["groups"])
    weight = a["patch_embed.proj.weight"]  # (D, C, p, p), a stride-p convolution
    p, (b, h, w, c) = arch["patch"], x.shape
    cells = x.reshape(b, h // p, p, w // p, p, c)
    x = np.einsum("bhpwqc,dcpq->bhwd", cells, weight) + a["patch_embed.proj.bias"]
    x = x.reshape(b, -1, weight.shape[0])
    if arch.get("class_token", True):
        x = np.concatenate([np.broadcast_to(a["cls_token"], (b, 1, x.shape[-1])), x], 1)
    x = x + a["pos_embed"]
    heads = arch.get("heads", 2)
    for i in range(sum(k.endswith(".attn.qkv.weight") for k in a)):
        key = f"blocks.{i}"
        y = _attention(_layer_norm(x, a, f"{key}.norm1", eps), a, f"{key}.attn", heads)
        x = x + (y * a[f"{key}.ls1.gamma"] if arch.get("layer_scale") else y)
        y = _layer_norm(x, a, f"{key}.norm2", eps)
        y = _linear(_gelu(_linear(y, a, f"{key}.mlp.fc1"), arch.get("tanh_gelu")), a,
                    f"{key}.mlp.fc2")  # fmt: skip
        x = x + (y * a[f"{key}.ls2.gamma"] if arch.get("layer_scale") else y)
    x = _layer_norm(x, a, "norm", eps)
    prefix = 1 if arch.get("class_token", True) else 0
    pooled = x[:, 0] if arch["pool"] == "token" else x[:, prefix:].mean(1)
    if features or "head.weight" not in a:
        return pooled
    return _linear(pooled, a, "head")


def _main(path):  # pragma: no cover - run by hand where timm is installed
    shapes = {}
    for case in CASES:
        state = timm_model(case).state_dict()
        shapes[case] = {k: list(v.shape) for k, v in state.items()}
    cases = [
        f'  "{case}": {{\n' + ",\n".join(f'    "{k}": {json.dumps(v)}' for k, v in keys.items())
        + "\n  }"
        for case, keys in shapes.items()
    ]
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(cases) + "\n}\n")
    print(f"wrote {path}: {', '.join(f'{c} {len(s)} keys' for c, s in shapes.items())}")


if __name__ == "__main__":  # pragma: no cover
    _main(sys.argv[1] if len(sys.argv) > 1 else KEYS_FILE)
