"""timm's BEiT weight names (`timm.models.beit.Beit`) -> keras_vit variables, both ways.

BEiT and BEiT v2 checkpoints: no absolute position embedding, a relative position bias table
in every block (`blocks.{i}.attn.relative_position_bias_table`) or one shared
(`rel_pos_bias.relative_position_bias_table`), q/v-only biases (`attn.q_bias`, `attn.v_bias`;
timm's key bias is a zero buffer), LayerScale as `gamma_1` / `gamma_2`, and `fc_norm` after the
average of the patch tokens. A table of another grid is resized as timm's
`checkpoint_filter_fn` does (`keras_vit.layers.resize_relative_position_table`).
"""

from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.layers.relative_position import resize_relative_position_table
from keras_vit.models.variable_paths import PATHS, RELATIVE_POSITION_BIAS, block
from keras_vit.weights import loading as L
from keras_vit.weights.registry import TimmLayout

_norm, _linear = L.torch_norm, L.torch_linear


def relative_position_table(grid_size):
    """A `(rows, heads)` table, resized to `grid_size` as timm does when it is another grid's."""

    def apply(array, shapes):
        expected = shapes[0]
        if array.ndim != 2 or array.shape[1] != expected[1]:
            raise L.Mismatch(f"found {L.shape_of(array)}")
        if L.shape_of(array) == expected:
            return (array,)
        try:
            return (resize_relative_position_table(array, grid_size),)
        except ValueError as error:
            why = f"found {L.shape_of(array)}, which cannot be resized: {error}"
            raise L.Mismatch(why) from error

    return L.Transform("relative_position_table", lambda shapes: shapes[0], apply, exact=False)


def _block(i, config):
    key, path = f"blocks.{i}", block(i)
    attention = f"{path}/attention"
    qkv = tuple(f"{attention}/{name}/kernel" for name in ("query", "key", "value"))
    table = {
        **_norm(f"{key}.norm1", f"{path}/attention_norm"),
        f"{key}.attn.qkv.weight": (qkv, L.QKV_WEIGHT),
        f"{key}.attn.q_bias": (f"{attention}/query/bias", L.HEADS_IN_BIAS),
        f"{key}.attn.v_bias": (f"{attention}/value/bias", L.HEADS_IN_BIAS),
        f"{key}.attn.proj.weight": (f"{attention}/attention_output/kernel", L.HEADS_OUT_WEIGHT),
        f"{key}.attn.proj.bias": (f"{attention}/attention_output/bias", L.IDENTITY),
        **_norm(f"{key}.norm2", f"{path}/mlp_norm"),
        **_linear(f"{key}.mlp.fc1", f"{path}/mlp_dense_1"),
        **_linear(f"{key}.mlp.fc2", f"{path}/mlp_dense_2"),
    }
    if config.relative_position_bias == "block":
        table[f"{key}.attn.relative_position_bias_table"] = (
            f"{path}/{RELATIVE_POSITION_BIAS}/relative_position_bias_table",
            relative_position_table(config.grid_size),
        )
    if config.layer_scale_init_value is not None:
        table[f"{key}.gamma_1"] = (f"{path}/attention_scale", L.IDENTITY)
        table[f"{key}.gamma_2"] = (f"{path}/mlp_scale", L.IDENTITY)
    return table


def beit_name_table(config):
    """timm's `Beit` state-dict names for `config`: `{timm key: (path(s), transform)}`.

    Args:
        config: a `keras_vit.models.config.ViTConfig` with `relative_position_bias` and
            `key_bias=False` (what `keras_vit.from_timm` builds for `beit*` names).

    Returns:
        dict in timm's order, for `keras_vit.weights.loading.load_state_dict`.

    Raises:
        ValueError: a config timm's `Beit` cannot have (key biases, no class token).

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=16, num_layers=1, key_bias=False,
    ...     position_embedding=None, relative_position_bias="block")
    >>> sorted(k for k in beit_name_table(config) if "bias_table" in k or "q_bias" in k)
    ['blocks.0.attn.q_bias', 'blocks.0.attn.relative_position_bias_table']
    """
    if config.key_bias or not config.class_token:
        raise ValueError(
            "timm's BEiT has q/v-only biases and a class token: expected key_bias=False, "
            f"class_token=True. Received: key_bias={config.key_bias}, "
            f"class_token={config.class_token}"
        )
    p = PATHS
    table = {"cls_token": (p["class_token"], L.IDENTITY)}
    if config.position_embedding == "learned":

        def resample(posemb, grid, prefix):
            return resample_position_embedding(
                posemb, grid, prefix, interpolation="bicubic", antialias=True
            )

        table["pos_embed"] = (
            p["position_embedding"],
            L.position_embedding(config.grid_size, 1, resample),
        )
    table["patch_embed.proj.weight"] = (p["patch_kernel"], L.CONV)
    table["patch_embed.proj.bias"] = (p["patch_bias"], L.IDENTITY)
    if config.relative_position_bias == "shared":
        table["rel_pos_bias.relative_position_bias_table"] = (
            f"{RELATIVE_POSITION_BIAS}/relative_position_bias_table",
            relative_position_table(config.grid_size),
        )
    for i in range(config.num_layers):
        table.update(_block(i, config))
    if config.fc_norm:
        table.update(_norm("fc_norm", p["fc_norm"]))
    else:
        table.update(_norm("norm", p["encoder_norm"]))
    if config.include_top:
        table.update(_linear("head", p["head"]))
    return table


def _claims(config, spec):
    """timm's `Beit` models: a relative position bias per block or shared (beit*, beitv2*)."""
    return getattr(config, "relative_position_bias", None) in ("block", "shared")


# The whole table of a `Beit` checkpoint (registered in keras_vit/families/beit/__init__.py).
TIMM_LAYOUT = TimmLayout(claims=_claims, name_table=lambda config, spec: beit_name_table(config))
