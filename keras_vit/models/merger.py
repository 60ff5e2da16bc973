"""A VLM vision tower's projector in a `VisionTransformer`: `merger_*` options, the `merger` layer.

Qwen3-VL's and DeepSeek-V4's vision towers hand their patch tokens to the LLM through a
projector that merges each `k x k` block of the patch grid into one wider token
(`keras_vit.layers.PatchMerger`). With `ViTConfig.merger_size` the model puts it (layer
`merger`, the role `VisionTransformer.merger`) after the blocks and the final norm, before the
pooling: `include_top=False, pooling=None` returns the merged tokens (timm's `*_enc` towers),
`pooling="gap"` their mean (timm's `*_merge` / `*_align` classifiers).
"""

from keras_vit.layers import PatchMerger
from keras_vit.layers._checks import check_positive_int

MERGER = "merger"


def merge_tokens(x, features, config, dtype_of):
    """The `merger` layer of `config` on the blocks' patch tokens `x` (None: `x` as it is).

    `features`: what the patch encoder embedded (the grid of each input).
    """
    if config.merger_size is None:
        return x
    layer = PatchMerger(
        config.merger_size,
        config.merger_dim,
        config.patch_size,
        hidden_dim=config.merger_hidden_dim,
        norm=config.norm if config.merger_norm else None,
        norm_epsilon=config.layer_norm_epsilon,
        padding=config.merger_padding,
        name=MERGER,
        dtype=dtype_of(MERGER),
    )
    return layer(x, features)


def check_merger(config):
    """The VLM projector (`merger_*`) and `final_and_fc_norm`."""
    check_positive_int(config.merger_size, "merger_size", allow_none=True)
    check_positive_int(config.merger_dim, "merger_dim", allow_none=True)
    check_positive_int(config.merger_hidden_dim, "merger_hidden_dim", allow_none=True)
    if config.final_and_fc_norm and not (config.fc_norm and config.final_norm):
        raise ValueError(
            "final_and_fc_norm=True keeps the final norm next to fc_norm: it needs "
            f"fc_norm=True and final_norm=True. Received: fc_norm={config.fc_norm}, "
            f"final_norm={config.final_norm}"
        )
    if config.merger_size is None:
        changed = [
            f"{name}={getattr(config, name)!r}"
            for name, default in (("merger_dim", None), ("merger_hidden_dim", None),
                                  ("merger_norm", False), ("merger_padding", False))  # fmt: skip
            if getattr(config, name) != default
        ]
        if changed:
            raise ValueError(f"{', '.join(changed)} need merger_size. Received: merger_size=None")
        return
    problems = []
    if config.merger_dim is None:
        problems.append("merger_dim=None (expected the merged tokens' width)")
    if config.class_token or config.num_register_tokens or config.distillation_token:
        problems.append(
            f"prefix tokens (class_token={config.class_token}, num_register_tokens="
            f"{config.num_register_tokens}, distillation_token={config.distillation_token})"
        )
    if config.pooling not in ("gap", None):
        problems.append(f"pooling={config.pooling!r} (expected 'gap' or None)")
    if config.naflex:
        problems.append("naflex=True")
    if problems:
        raise ValueError(
            f"merger_size={config.merger_size} merges the patch grid of patch tokens only. "
            f"Received: {'; '.join(problems)}"
        )
