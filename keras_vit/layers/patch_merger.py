"""`PatchMerger`: a VLM projector, `k x k` pixel-unshuffle of the patch tokens and an MLP.

The vision towers of vision-language models hand the LLM fewer, wider tokens than their blocks
make: Qwen3-VL's "merger" (timm's `Qwen3VitPatchMerger`: LayerNorm, 2 x 2 unshuffle, `fc1`,
GELU, `fc2`) and DeepSeek-V4's "aligner" (timm's `DeepseekVitAligner`: 3 x 3 unshuffle of a grid
zero-padded to a multiple of 3, `fc1`, GELU, `fc2`).
"""

import keras
from keras import ops

from keras_vit.layers._checks import check_bool, check_positive_int, check_positive_int_pair
from keras_vit.layers._quantization import RecordsQuantizedSublayers, sublayer_dtype
from keras_vit.layers.attention import check_epsilon
from keras_vit.layers.norms import check_norm, make_norm
from keras_vit.layers.sharding import COLUMN, ROW


def merged_grid(rows, columns, merge_size, padding, name="patch_merger"):
    """The merged grid `(rows / k, columns / k)` (rounded up with `padding`), checked.

    Ints (or None: unknown) in, ints (or None) out; a grid `k` does not divide raises a
    ValueError without `padding`.
    """
    if not padding:
        for axis, size in (("rows", rows), ("columns", columns)):
            if isinstance(size, int) and size % merge_size:
                raise ValueError(
                    f"Layer '{name}' merges {merge_size} x {merge_size} patches: the patch "
                    f"grid must be divisible by merge_size={merge_size} (or padding=True). "
                    f"Received: a grid of {rows} x {columns} patches ({axis}: {size})"
                )
    return tuple(None if s is None else -(-s // merge_size) for s in (rows, columns))


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchMerger(RecordsQuantizedSublayers):
    """Merges each `k x k` block of patch tokens into one token: `fc2(gelu(fc1(unshuffle(x))))`.

    The `(B, h * w, D)` patch tokens (row-major, no prefix tokens) are laid out on their grid,
    read at run time from the tensor the patch encoder embedded (`(h, w) = (H / ph, W / pw)`,
    as `keras_vit.layers.TokenGrid`), optionally normalised (`norm`), and each `k x k` block
    becomes one token of its `k * k * D` values in `(row, column, channel)` order (timm's Qwen
    merger; DeepSeek's aligner concatenates `(channel, row, column)`: its loader permutes `fc1`'s
    input rows). The merged tokens, row-major on the `(h / k, w / k)` grid, go through `fc1`
    (width `hidden_dim`), exact GELU and `fc2` (width `output_dim`).

    Args:
        merge_size: int. `k`.
        output_dim: int. Width of the merged tokens (the LLM's width).
        patch_size: int or (height, width). The patch encoder's patch size (gives the grid).
        hidden_dim: optional int. Width of `fc1`; None means `k * k * D` (Qwen's).
            Defaults to None.
        norm: None, `"layernorm"` or `"rmsnorm"`: a norm (`norm`) on each patch token before the
            merge. Defaults to None.
        norm_epsilon: float. Defaults to 1e-6.
        padding: bool. Zero-pad the grid at the bottom and right to a multiple of `k`
            (DeepSeek's aligner); False: a grid `k` does not divide is an error. Defaults to
            False.

    Call arguments:
        tokens: `(B, h * w, D)` patch tokens.
        reference: `(B, H, W, C)` the patch encoder's input.

    Returns:
        `(B, ceil(h / k) * ceil(w / k), output_dim)`.

    Example:

    >>> import numpy as np
    >>> merger = PatchMerger(2, output_dim=24, patch_size=8, norm="layernorm")
    >>> tokens, images = np.zeros((2, 8, 16), "float32"), np.zeros((2, 16, 32, 3), "float32")
    >>> tuple(merger(tokens, images).shape)
    (2, 2, 24)

    Reference:
        Qwen3-VL Technical Report (arXiv:2511.21631), vision encoder; DeepSeek-V4.1-Flash
        (arXiv:2609.19969), vision aligner.
    """

    # Tensor-parallel roles of the projections (keras_vit.layers.sharding).
    sharding_roles = {"fc1": COLUMN, "fc2": ROW}

    def __init__(
        self,
        merge_size,
        output_dim,
        patch_size,
        hidden_dim=None,
        norm=None,
        norm_epsilon=1e-6,
        padding=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.merge_size = check_positive_int(merge_size, "merge_size")
        self.output_dim = check_positive_int(output_dim, "output_dim")
        self.patch_size = check_positive_int_pair(patch_size, "patch_size")
        self.hidden_dim = check_positive_int(hidden_dim, "hidden_dim", allow_none=True)
        self.norm = None if norm is None else check_norm(norm)
        self.norm_epsilon = check_epsilon(norm_epsilon, "norm_epsilon")
        self.padding = check_bool(padding, "padding")

    def _merged_width(self, width):
        return self.merge_size * self.merge_size * width

    def build(self, tokens_shape, reference_shape=None):
        width = tuple(tokens_shape)[-1]
        if width is None:
            raise ValueError(
                f"Layer '{self.name}' needs a known token width. Received: tokens shape="
                f"{tuple(tokens_shape)}"
            )
        hidden = self.hidden_dim or self._merged_width(width)
        if self.norm is not None:
            self.token_norm = make_norm(self.norm, self.norm_epsilon, "norm", self.dtype_policy)
            self.token_norm.build((None, None, width))
        self.fc1 = keras.layers.Dense(hidden, dtype=sublayer_dtype(self, "fc1"), name="fc1")
        self.fc2 = keras.layers.Dense(
            self.output_dim, dtype=sublayer_dtype(self, "fc2"), name="fc2"
        )
        self.fc1.build((None, None, self._merged_width(width)))
        self.fc2.build((None, None, hidden))
        self.built = True

    def _grid(self, reference_shape):
        rows, columns = reference_shape[1], reference_shape[2]
        ph, pw = self.patch_size
        return (None if rows is None else rows // ph, None if columns is None else columns // pw)

    def call(self, tokens, reference):
        shape = ops.shape(reference)
        rows, columns = shape[1] // self.patch_size[0], shape[2] // self.patch_size[1]
        k, width = self.merge_size, tokens.shape[-1]
        if isinstance(rows, int) and isinstance(columns, int):
            merged_grid(rows, columns, k, self.padding, self.name)
        x = self.token_norm(tokens) if self.norm is not None else tokens
        batch = ops.shape(tokens)[0]
        x = ops.reshape(x, (batch, rows, columns, width))
        if self.padding:
            x = ops.pad(x, ((0, 0), (0, (-rows) % k), (0, (-columns) % k), (0, 0)))
            rows, columns = rows + (-rows) % k, columns + (-columns) % k
        x = ops.reshape(x, (batch, rows // k, k, columns // k, k, width))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        x = ops.reshape(x, (batch, (rows // k) * (columns // k), k * k * width))
        x = ops.gelu(self.fc1(x), approximate=False)
        return self.fc2(x)

    def compute_output_shape(self, tokens_shape, reference_shape):
        rows, columns = self._grid(reference_shape)
        rows, columns = merged_grid(rows, columns, self.merge_size, self.padding, self.name)
        count = None if rows is None or columns is None else rows * columns
        return (tokens_shape[0], count, self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "merge_size": self.merge_size,
                "output_dim": self.output_dim,
                "patch_size": self.patch_size,
                "hidden_dim": self.hidden_dim,
                "norm": self.norm,
                "norm_epsilon": self.norm_epsilon,
                "padding": self.padding,
            }
        )
        return config
