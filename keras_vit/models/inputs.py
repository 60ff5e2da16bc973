"""What a `VisionTransformer` takes, checked at its entry on every backend.

`check_inputs(config, inputs, name)` is the one function `VisionTransformer.__call__` (eager
calls, and every trace: `predict`, `fit`, `jit`, `tf.function`) and `VisionTransformer.predict` /
`evaluate` (NumPy inputs, before Keras builds its step function) run. It raises a `ValueError` in
keras_vit's words (the input's name, what was expected, what was received) instead of a backend's
broadcast or `dot_general` error:

- images of a plain or hybrid model: rank 4, the model's channel count, and the model's
  `image_size` (any size the patch divides with `dynamic_image_size`);
- a NaFlex batch: a dict of exactly `patches`, `patch_coord`, `patch_valid` (a missing or an
  extra key named); ranks `(B, N, P)`, `(B, N, 2)`, `(B, N)`; the same `B` and `N` in all
  three; `P = patch height * patch width * channels`; float patches, integer coordinates, a
  bool (or 0 / 1 integer) mask;
- and, where the values are concrete (NumPy arrays, eager tensors in host memory; not inside a
  traced graph, where only the shapes are known, nor for PyTorch tensors on an accelerator,
  which would cost a device-to-host copy per step), each image's valid coordinates: none
  negative (a negative `patch_coord` on a valid token made that image's output NaN), and
  together they fill the
  image's patch grid `(largest y + 1, largest x + 1)` exactly once (what `naflex_batch`,
  `naflex_dataset` and timm's loader make; a coordinate past the grid of the image's tokens
  gave other numbers than timm, which adds its resized table in row-major order).

Inside a traced graph (a `tf.data` pipeline fed to `fit`, a JAX `jit`, a SavedModel) the value
checks cannot run without breaking the trace: validate such data where it is made
(`keras_vit.data.naflex_batch` / `naflex_dataset` build valid batches), or call
`check_inputs` on a NumPy batch of it.
"""

import keras
import numpy as np

from keras_vit.layers._checks import concrete

NAFLEX_KEYS = ("patches", "patch_coord", "patch_valid")


def _shape(value):
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(None if d is None else int(d) for d in shape)
    except TypeError:  # a TF TensorShape with unknown rank
        return None


def _kind(value):
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    try:
        name = keras.backend.standardize_dtype(dtype)
    except ValueError:
        return None
    if name == "bool":
        return "b"
    if keras.backend.is_float_dtype(name):
        return "f"
    if keras.backend.is_int_dtype(name):
        return "i"
    return None


def check_inputs(config, inputs, name, values=True):
    """Checks what a model of `config` (named `name`) is called on; see the module docstring.

    Args:
        config: the model's `ViTConfig`.
        inputs: images `(B, H, W, C)`, or a NaFlex dict; NumPy arrays or tensors.
        name: str. The model's name, for messages.
        values: bool. Whether to check concrete NaFlex coordinates too. Defaults to True.

    Raises:
        ValueError: naming the input, the expected and the received value.

    Example:

    >>> from keras_vit.models.config import ViTConfig
    >>> config = ViTConfig.from_variant("mu/8", image_size=32)
    >>> check_inputs(config, np.zeros((1, 48, 48, 3)), "vit_mu8")
    Traceback (most recent call last):
        ...
    ValueError: Model 'vit_mu8' takes images of height 32 and width 32 (its image_size; build \
it with dynamic_image_size=True for other sizes). Received: images of shape (1, 48, 48, 3)
    """
    if config.naflex:
        return check_naflex_inputs(config, inputs, name, values)
    return check_images(config, inputs, name)


def check_images(config, images, name):
    """The image checks of `check_inputs` (a plain or hybrid model)."""
    if isinstance(images, dict):
        raise ValueError(
            f"Model '{name}' takes a batch of images (B, H, W, C), not a dict (a NaFlex batch "
            f"is for models built with naflex=True). Received: a dict with keys {sorted(images)}"
        )
    shape = _shape(images)
    if shape is None:
        return
    if len(shape) != 4:
        raise ValueError(
            f"Model '{name}' takes a batch of images of rank 4 (batch, height, width, "
            f"channels). Received: images of shape {shape}"
        )
    if shape[3] is not None and shape[3] != config.num_channels:
        raise ValueError(
            f"Model '{name}' takes images with {config.num_channels} channels (its "
            f"num_channels). Received: images of shape {shape}"
        )
    height, width = config.image_size
    if config.dynamic_image_size:
        return
    if (shape[1] is not None and shape[1] != height) or (
        shape[2] is not None and shape[2] != width
    ):
        raise ValueError(
            f"Model '{name}' takes images of height {height} and width {width} (its image_size; "
            "build it with dynamic_image_size=True for other sizes). Received: images of shape "
            f"{shape}"
        )


def check_naflex_inputs(config, batch, name, values=True):
    """The NaFlex checks of `check_inputs`: keys, dtypes, shapes, then concrete values."""
    if not isinstance(batch, dict):
        raise ValueError(
            f"NaFlex model '{name}' takes a dict with the keys {list(NAFLEX_KEYS)} (made by "
            "keras_vit.data.naflex_batch). Received: "
            f"{type(batch).__name__} of shape {_shape(batch)}"
        )
    missing = [key for key in NAFLEX_KEYS if key not in batch]
    extra = sorted(str(key) for key in batch if key not in NAFLEX_KEYS)
    if missing or extra:
        what = [f"missing {missing}"] if missing else []
        what += [f"unexpected {extra}"] if extra else []
        raise ValueError(
            f"NaFlex model '{name}' takes a dict with exactly the keys {list(NAFLEX_KEYS)}. "
            f"Received: keys {sorted(map(str, batch))} ({', '.join(what)})"
        )
    ph, pw = config.patch_size
    width = ph * pw * config.num_channels
    expected = {
        "patches": (3, f"(B, N, {width}) (patch {ph} x {pw} x {config.num_channels} channels)"),
        "patch_coord": (3, "(B, N, 2)"),
        "patch_valid": (2, "(B, N)"),
    }
    shapes = {key: _shape(batch[key]) for key in NAFLEX_KEYS}
    for key, (rank, text) in expected.items():
        shape = shapes[key]
        if shape is None:
            continue
        last = {"patches": width, "patch_coord": 2}.get(key)
        if len(shape) != rank or (last is not None and shape[-1] not in (None, last)):
            raise ValueError(
                f"NaFlex model '{name}': {key} must have shape {text}. Received: {key} of "
                f"shape {shape}"
            )
    for axis, what in ((0, "batch size B"), (1, "token count N")):
        sizes = {k: s[axis] for k, s in shapes.items() if s is not None and s[axis] is not None}
        if len(set(sizes.values())) > 1:
            raise ValueError(
                f"NaFlex model '{name}': patches, patch_coord and patch_valid must have the "
                f"same {what}. Received: " + ", ".join(f"{k} {shapes[k]}" for k in sizes)
            )
    kinds = {key: _kind(batch[key]) for key in NAFLEX_KEYS}
    allowed = {"patches": ("f",), "patch_coord": ("i",), "patch_valid": ("b", "i")}
    for key, ok in allowed.items():
        if kinds[key] is not None and kinds[key] not in ok:
            want = {"patches": "a float", "patch_coord": "an integer", "patch_valid": "a bool"}
            raise ValueError(
                f"NaFlex model '{name}': {key} must be {want[key]} array. Received: {key} of dtype "
                f"{keras.backend.standardize_dtype(batch[key].dtype)}"
            )
    if not values:
        return
    coord, valid = concrete(batch["patch_coord"]), concrete(batch["patch_valid"])
    if coord is not None and valid is not None:
        check_naflex_coordinates(coord, valid, name)


def check_naflex_coordinates(patch_coord, patch_valid, name="the model"):
    """Concrete `patch_coord` / `patch_valid`: no negative coordinate on a valid token, and
    each image's valid tokens fill its grid (largest coordinate + 1) exactly once."""
    coord = np.asarray(patch_coord).astype("int64")
    valid = np.asarray(patch_valid).astype(bool)
    negative = np.argwhere(valid & (coord < 0).any(axis=-1))
    if len(negative):
        b, n = (int(i) for i in negative[0])
        raise ValueError(
            f"NaFlex model '{name}': patch_coord must be >= 0 on valid tokens (row, column in "
            f"the image's patch grid). Received: patch_coord[{b}, {n}] = {coord[b, n].tolist()} "
            f"with patch_valid[{b}, {n}] True"
        )
    for b in range(coord.shape[0]):
        points = coord[b][valid[b]]
        if not len(points):
            continue
        rows, cols = (int(v) + 1 for v in points.max(axis=0))
        cells = np.unique(points[:, 0] * cols + points[:, 1])
        if len(points) != rows * cols or len(cells) != len(points):
            raise ValueError(
                f"NaFlex model '{name}': the valid tokens of image {b} must fill its patch grid "
                f"(largest patch_coord + 1 = {rows} x {cols} patches) once each, as "
                f"keras_vit.data.naflex_batch makes them. Received: {len(points)} valid tokens, "
                f"{len(cells)} distinct coordinates, largest patch_coord "
                f"{points.max(axis=0).tolist()} (a coordinate past the image's grid?)"
            )


def _is_batch(x):
    """Whether `x` is a batch `check_inputs` can read (an array, a tensor, or a dict of them),
    not a dataset, a generator or a `PyDataset`."""
    if isinstance(x, dict):
        return all(hasattr(v, "shape") and hasattr(v, "dtype") for v in x.values())
    return hasattr(x, "shape") and hasattr(x, "dtype")


def run_checked(model, method, x, args, kwargs):
    """`method(x, *args, **kwargs)` (Keras' `predict` / `evaluate`) after `check_inputs` on
    `x` when it is a batch; on JAX, a failure leaves the model usable.

    Keras 3's JAX trainer detaches the variables' values while its step function runs
    (`purge_model_variables`) and only puts them back when it completes, so one failed
    `predict` left every later call failing ("'NoneType' object is not callable"). The values
    are kept here and put back when `method` raises.
    """
    if isinstance(x, (list, tuple)) and len(x) != 1 and all(map(_is_batch, x)):
        shapes = [_shape(item) for item in x][:4]
        raise ValueError(
            f"Model '{model.name}' takes one array of images (batch, height, width, channels). "
            f"Received: a {type(x).__name__} of {len(x)} arrays of shapes {shapes}"
            f"{' ...' if len(x) > 4 else ''}. Stack them into one batch: np.stack(images) for "
            "single images, np.concatenate(batches) for batches."
        )
    if x is not None and _is_batch(x):
        check_inputs(model.config, x, model.name)
    if keras.backend.backend() != "jax":
        return method(x, *args, **kwargs)
    variables = list(model.variables) + list(getattr(model, "metrics_variables", ()))
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    values = [(variable, variable._value) for variable in variables]
    try:
        return method(x, *args, **kwargs)
    except BaseException:
        for variable, value in values:
            if variable._value is None:
                variable._value = value
        model._jax_state = None
        model._jax_state_synced = True
        raise


class CheckedInputs:
    """The entry checks of `VisionTransformer` (a mixin before `keras.Model`): `__call__` checks
    shapes and values, `call` shapes again (JAX's `stateless_call` in `predict` / `fit` calls
    `call` without `__call__`), `predict` / `evaluate` a NumPy batch before Keras builds its
    step function (see `run_checked`)."""

    def __call__(self, *args, **kwargs):
        inputs = args[0] if args else kwargs.get("inputs")
        if inputs is not None:
            check_inputs(self.config, inputs, self.name)
        return super().__call__(*args, **kwargs)

    def call(self, inputs, *args, **kwargs):
        check_inputs(self.config, inputs, self.name, values=False)
        return super().call(inputs, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        shape = _shape(x) if not isinstance(x, dict) and _is_batch(x) else None
        if shape and shape[0] == 0:  # Keras' predict has no batch to run (UnboundLocalError)
            check_inputs(self.config, x, self.name)
            return keras.ops.convert_to_numpy(self(x))
        return run_checked(self, super().predict, x, args, kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        return run_checked(self, super().evaluate, x, args, kwargs)
