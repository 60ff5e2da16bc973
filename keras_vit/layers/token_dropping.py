"""Token dropping: MAE's per-image random masking by shuffling, and patch dropout (FLIP).

One mechanism for two uses. Masked autoencoders (He et al., 2022) keep a random
`int(N * (1 - rate))` of the N patch tokens of every image before the encoder; patch dropout
(Li et al., 2023, FLIP; Liu et al., 2022; timm's `PatchDropout`) does the same in supervised
training only, as a regulariser that also makes each step cheaper. Both draw per image, exactly
as MAE (and transformers' `ViTMAEEmbeddings.random_masking`):

    noise       uniform [0, 1) per patch (or given: `noise=`)       (B, N)
    ids_shuffle = argsort(noise)        ids_restore = argsort(ids_shuffle)
    ids_keep    = ids_shuffle[:, :K]    kept tokens = gather(patch tokens, ids_keep)
    mask        1 where a patch is dropped, in the original order  (B, N)

applied after the position embedding; the prefix tokens (class, distillation, registers) are
always kept, in front. K is a Python int from the static token count, so every shape is static:
the same step compiles under XLA (JAX, TensorFlow `jit_compile`) and runs under torch.

Rotary position embeddings travel with their tokens: `gather_rotary` gathers each image's rows of
the rotary table by the same `ids_keep`, giving the per-image `(B, K, 1 or heads, 2 * head_dim)`
tables the attention layers take (as a NaFlex batch's).
"""

import keras
import numpy as np
from keras import ops

from keras_vit.layers._checks import check_bool, check_non_negative_int, check_rate, check_seed

__all__ = ["TokenDropping"]


def num_kept(num_patches, rate):
    """Patches kept of `num_patches` at drop `rate`: `int(N * (1 - rate))` (MAE's `len_keep`).

    Example:

    >>> num_kept(196, 0.75), num_kept(16, 0.5)
    (49, 8)
    """
    return check_kept(num_patches, rate, "rate")


def check_kept(num_patches, rate, name):
    """`num_kept(num_patches, rate)`, else a ValueError naming the argument `name` (the user's
    word for the rate: `patch_dropout_rate`, `mask_ratio`) when no patch would be kept.

    Example:

    >>> check_kept(16, 0.999, "mask_ratio")
    Traceback (most recent call last):
        ...
    ValueError: mask_ratio=0.999 drops every one of the 16 patch tokens (it keeps int(16 * \
(1 - 0.999)) = 0): lower mask_ratio or use more patches (a larger image or a smaller patch \
size). Received: mask_ratio=0.999, patches=16
    """
    kept = int(num_patches * (1.0 - rate))
    if kept < 1:
        raise ValueError(
            f"{name}={rate} drops every one of the {num_patches} patch tokens (it keeps "
            f"int({num_patches} * (1 - {rate})) = {kept}): lower {name} or use more patches (a "
            f"larger image or a smaller patch size). Received: {name}={rate}, "
            f"patches={num_patches}"
        )
    return kept


def gather_tokens(tokens, ids):
    """`tokens` `(B, N, D)` gathered along the tokens by int `ids` `(B, K)` -> `(B, K, D)`."""
    index = ops.expand_dims(ops.cast(ids, "int32"), -1)
    index = ops.repeat(index, tokens.shape[-1], axis=-1)
    return ops.take_along_axis(tokens, index, axis=1)


def gather_rotary(table, ids):
    """Each image's rows of a rotary table: `(N, 2 * hd)` -> `(B, K, 1, 2 * hd)`, or a mixed
    RoPE's `(N, heads, 2 * hd)` -> `(B, K, heads, 2 * hd)`, for int `ids` `(B, K)`."""
    if isinstance(table, (list, tuple)):  # mixed RoPE: one table per block
        return [gather_rotary(t, ids) for t in table]
    if len(table.shape) not in (2, 3):
        raise ValueError(
            "Token dropping gathers a rotary table (tokens, 2 * head_dim) or (tokens, heads, "
            f"2 * head_dim). Received: shape={tuple(table.shape)}"
        )
    rows = ops.take(table, ops.cast(ids, "int32"), axis=0)
    return rows[:, :, None, :] if len(table.shape) == 2 else rows


def random_masking(patches, noise, keep):
    """MAE's masking of `patches` `(B, N, D)` by `noise` `(B, N)`, keeping `keep` per image.

    Returns:
        `(kept (B, keep, D), mask (B, N) float32 1 = dropped, ids_restore (B, N) int32,
        ids_keep (B, keep) int32)`.
    """
    ids_shuffle = ops.cast(ops.argsort(noise, axis=1), "int32")
    ids_restore = ops.cast(ops.argsort(ids_shuffle, axis=1), "int32")
    ids_keep = ids_shuffle[:, :keep]
    mask = ops.cast(ids_restore >= keep, "float32")
    return gather_tokens(patches, ids_keep), mask, ids_restore, ids_keep


@keras.saving.register_keras_serializable(package="keras_vit")
def check_noise(noise, batch, num_patches, name="noise"):
    """MAE's `noise` as `(batch, num_patches)` numbers (a list becomes a NumPy array), else a
    ValueError naming what was expected; `batch` / `num_patches` None: not checked."""
    if noise is None:
        return None
    if isinstance(noise, (list, tuple)):
        try:
            noise = np.asarray(noise)
        except ValueError as error:
            raise ValueError(
                f"{name} must be a (batch, patches) array. Received: {error}"
            ) from None
    dtype = getattr(noise, "dtype", None)
    try:
        kind = keras.backend.standardize_dtype(dtype) if dtype is not None else None
    except (TypeError, ValueError):  # strings, objects
        kind = None
    if kind is None or kind == "bool" or not (
        keras.backend.is_float_dtype(kind) or keras.backend.is_int_dtype(kind)
    ):
        raise ValueError(
            f"{name} must be numbers (its argsort orders the patches; uniform [0, 1) floats as "
            f"MAE draws). Received: {type(noise).__name__} of dtype {dtype}"
        )
    shape = tuple(noise.shape)
    if (
        len(shape) != 2
        or (num_patches is not None and shape[1] is not None and shape[1] != num_patches)
        or (batch is not None and shape[0] is not None and shape[0] != batch)
    ):
        rows = "batch" if batch is None else batch
        raise ValueError(
            f"{name} must have shape ({rows}, {num_patches}): one row per image, one value per "
            f"patch. Received: {name}.shape={shape}"
        )
    return noise


class TokenDropping(keras.layers.Layer):
    """Drops a random fraction of each image's patch tokens (MAE masking, patch dropout).

    Args:
        rate: float in [0, 1). Fraction of the patch tokens dropped (MAE's `mask_ratio`,
            timm's `patch_drop_rate`); `int(N * (1 - rate))` are kept.
        num_prefix_tokens: int. Tokens in front (class, distillation, registers), always
            kept. Defaults to 0.
        training_only: bool. True: patch dropout, the identity outside training (the outputs
            keep their structure: every patch kept, mask zeros, identity ids). False: MAE's
            masking at every call. Defaults to False.
        seed: optional int for the noise. Defaults to None.

    Call arguments:
        tokens: `(B, P + N, D)` tokens (prefix first), N static.
        noise: optional float `(B, N)`: the noise whose argsort orders the patches (MAE's
            and transformers' `noise=`); uniform [0, 1) drawn per call when None.
        rotary_embedding: optional rotary table `(N, 2 * hd)`, `(N, heads, 2 * hd)`, or a
            list of them (one per block): gathered with the kept tokens (`gather_rotary`).
        training: bool (what `training_only` reads).

    Returns:
        dict: `tokens` `(B, P + K, D)`, `mask` float32 `(B, N)` (1 = dropped), `ids_restore`
        int32 `(B, N)` (where each patch went in the shuffle), `ids_keep` int32 `(B, K)`,
        and `rotary_embedding` when one was given. K is `int(N * (1 - rate))` (N with
        `training_only` outside training; the symbolic token count is then None).

    Example:

    >>> import numpy as np
    >>> out = TokenDropping(0.75, num_prefix_tokens=1)(np.zeros((2, 17, 8), "float32"))
    >>> tuple(out["tokens"].shape), tuple(out["mask"].shape)
    ((2, 5, 8), (2, 16))

    Reference:
        He et al., 2022, "Masked Autoencoders Are Scalable Vision Learners", Sec. 3;
        Li et al., 2023, "Scaling Language-Image Pre-training via Masking" (FLIP).
    """

    def __init__(self, rate, num_prefix_tokens=0, training_only=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate(rate, "rate")
        self.num_prefix_tokens = check_non_negative_int(num_prefix_tokens, "num_prefix_tokens")
        self.training_only = check_bool(training_only, "training_only")
        self.seed = check_seed(seed)
        self.seed_generator = keras.random.SeedGenerator(seed, name="seed_generator")

    def __call__(self, tokens, *args, noise=None, **kwargs):
        shape = tuple(getattr(tokens, "shape", ()))
        patches = shape[1] - self.num_prefix_tokens if len(shape) == 3 and shape[1] else None
        noise = check_noise(noise, shape[0] if shape else None, patches)
        return super().__call__(tokens, *args, noise=noise, **kwargs)

    def _num_patches(self, shape):
        if len(shape) != 3 or shape[1] is None:
            raise ValueError(
                f"Layer '{self.name}' needs tokens (batch, tokens, width) with a static token "
                f"count (static shapes). Received: shape={tuple(shape)}"
            )
        patches = shape[1] - self.num_prefix_tokens
        if patches < 1:
            raise ValueError(
                f"Layer '{self.name}' has num_prefix_tokens={self.num_prefix_tokens} but its "
                f"input has {shape[1]} tokens: no patch tokens. Received: shape={tuple(shape)}"
            )
        return patches

    def build(self, input_shape):
        patches = self._num_patches(input_shape)
        if self.rate:  # refused when the layer is made, not at the first training step
            try:
                check_kept(patches, self.rate, "rate")
            except ValueError as error:
                raise ValueError(f"Layer '{self.name}': {error}") from None
        self.built = True

    def call(self, tokens, noise=None, rotary_embedding=None, training=None):
        num_patches = self._num_patches(tuple(tokens.shape))
        prefix, patches = tokens[:, : self.num_prefix_tokens], tokens[:, self.num_prefix_tokens :]
        batch = ops.shape(tokens)[0]
        if self.rate == 0 or (self.training_only and not training):
            identity = ops.broadcast_to(
                ops.arange(num_patches, dtype="int32")[None], (batch, num_patches)
            )
            kept, ids_keep = patches, identity
            mask, ids_restore = ops.zeros((batch, num_patches), "float32"), identity
        else:
            if noise is None:
                noise = keras.random.uniform((batch, num_patches), seed=self.seed_generator)
            elif tuple(noise.shape)[1:] != (num_patches,):
                raise ValueError(
                    f"noise must have shape (batch, {num_patches}), one value per patch. "
                    f"Received: noise.shape={tuple(noise.shape)}"
                )
            keep = num_kept(num_patches, self.rate)
            kept, mask, ids_restore, ids_keep = random_masking(patches, noise, keep)
        if self.num_prefix_tokens:
            kept = ops.concatenate([prefix, kept], axis=1)
        outputs = {"tokens": kept, "mask": mask, "ids_restore": ids_restore, "ids_keep": ids_keep}
        if rotary_embedding is not None:
            outputs["rotary_embedding"] = gather_rotary(rotary_embedding, ids_keep)
        return outputs

    def compute_output_spec(self, tokens, noise=None, rotary_embedding=None, training=None):
        num_patches = self._num_patches(tuple(tokens.shape))
        batch, width = tokens.shape[0], tokens.shape[2]
        keep = None if self.training_only else num_patches
        if not self.training_only and self.rate:
            keep = num_kept(num_patches, self.rate)
        total = None if keep is None else self.num_prefix_tokens + keep
        outputs = {
            "tokens": keras.KerasTensor((batch, total, width), dtype=tokens.dtype),
            "mask": keras.KerasTensor((batch, num_patches), dtype="float32"),
            "ids_restore": keras.KerasTensor((batch, num_patches), dtype="int32"),
            "ids_keep": keras.KerasTensor((batch, keep), dtype="int32"),
        }
        if rotary_embedding is not None:

            def spec(table):
                heads = 1 if len(table.shape) == 2 else table.shape[1]
                return keras.KerasTensor((batch, keep, heads, table.shape[-1]), table.dtype)

            if isinstance(rotary_embedding, (list, tuple)):
                outputs["rotary_embedding"] = [spec(t) for t in rotary_embedding]
            else:
                outputs["rotary_embedding"] = spec(rotary_embedding)
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "rate": self.rate,
                "num_prefix_tokens": self.num_prefix_tokens,
                "training_only": self.training_only,
                "seed": self.seed,
            }
        )
        return config
