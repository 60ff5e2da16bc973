"""What a model's SavedModel serves: `serving_spec(model, ...)` checks that a model can be
exported and describes its signatures and outputs; `read_class_names(path)` reads a labels file.
Used by `keras_vit.export.saved_model` (and the ONNX / LiteRT exporters through it); no
TensorFlow here.
"""

import os

import keras

from keras_vit.export import _checks
from keras_vit.export.naflex_serving import check_max_patches, naflex_config

SIGNATURES = ("serving_default", "serve_uint8", "serve_bytes")
# Channel counts `tf.io.decode_image` can produce.
_DECODE_CHANNELS = (1, 3, 4)
_HEAD_ACTIVATIONS = ("linear", "softmax", "sigmoid")


def read_class_names(path):
    """Reads class names from a text file: one per line, in class-index order.

    Trailing blank lines are ignored; a UTF-8 byte-order mark is dropped.

    Args:
        path: str or path-like. A UTF-8 text file.

    Returns:
        list of str.

    Raises:
        FileNotFoundError: `path` does not exist.
        IsADirectoryError: `path` is a folder.
        ValueError: the file is not UTF-8 text.

    Example:

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "classes.txt")
    ...     with open(path, "w", encoding="utf-8") as f:
    ...         _ = f.write("cat\\ndog\\n\\n")
    ...     read_class_names(path)
    ['cat', 'dog']
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Class names file not found: {path!r}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"Class names path {path!r} is a folder; expected a text file.")
    try:
        with open(path, encoding="utf-8-sig") as f:
            names = f.read().split("\n")  # universal newlines: "\r\n" and "\r" read as "\n"
    except UnicodeDecodeError as error:
        raise ValueError(
            f"Class names file {path!r} is not UTF-8 text ({error.reason} at byte "
            f"{error.start}). Save it as UTF-8, one class name per line."
        ) from None
    while names and not names[-1].strip():
        names.pop()
    return names


def _check_class_names(class_names):
    if class_names is None:
        return None
    if isinstance(class_names, (str, bytes)):
        raise ValueError(
            "class_names must be a sequence of strings, one per class. "
            f"Received: class_names={class_names!r}"
        )
    names = list(class_names)
    if not names or not all(isinstance(name, str) for name in names):
        raise ValueError(
            "class_names must be a non-empty sequence of strings, one per class. "
            f"Received: class_names={class_names!r}"
        )
    return names


def _final_activation(model):
    """The activation layer after a distilled model's averaged heads (its role), or None."""
    return getattr(model, "output_activation", None)


def _activation_name(layer):
    activation = getattr(layer, "activation", None)
    if activation is None:
        return "linear"
    return getattr(activation, "__name__", repr(activation))


def serving_spec(model, class_names=None, top_k=None, max_patches=None):
    """Checks that `model` can be exported and describes its serving interface.

    Args:
        model: a keras_vit model with one `(B, H, W, C)` image input of known
            size and a classifier (`model.head`: built with `include_top=True`).
        class_names: optional sequence of str, one per class. Defaults to the model's own
            (`model.config.class_names`), if any.
        top_k: optional int in [1, num_classes]. Defaults to `min(5, num_classes)`
            when `class_names` is given, else no top-k outputs.

    Returns:
        dict with `image_size` (H, W; None for a dynamic-size model), `resize_size`
        (the size `serve_bytes` resizes to), `num_channels`, `num_classes`,
        `activation` (of the head: `"linear"`, `"softmax"` or `"sigmoid"`),
        `top_k`, `class_names`, `signatures` and `outputs`.

        A NaFlex model (`naflex=True`) adds `naflex` (its patch size) and `max_patches`
        (the patch budget of `serve_bytes`; default the position table's grid).

    Raises:
        ValueError: if the model or arguments cannot be exported.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"model must be a keras.Model. Received: {type(model).__name__}")
    naflex = naflex_config(model)
    if naflex is not None:
        height = width = None
        channels = naflex.num_channels
        resize_to = None
        max_patches = check_max_patches(max_patches, naflex.grid_size)
    else:
        if max_patches is not None:
            raise ValueError(
                "max_patches is the patch budget of a NaFlex model's serve_bytes. Received: "
                f"max_patches={max_patches!r} for a model without naflex=True"
            )
        height, width, channels = _checks.image_input_shape(
            model, "export_saved_model", allow_dynamic=True
        )[1:]
        dynamic = height is None or width is None
        resize_to = _checks.native_image_size(model) if dynamic else (height, width)
    head = getattr(model, "head", None)
    if head is None:
        raise ValueError(
            "export_saved_model exports classifiers: it needs a classifier head (model.head "
            "of a keras_vit model built with include_top=True). For a feature extractor use "
            f"keras' model.export(). Received: model {model.name!r} without a head"
        )
    output_shape = tuple(model.outputs[0].shape) if len(model.outputs) == 1 else None
    if output_shape is None or len(output_shape) != 2 or output_shape[-1] is None:
        raise ValueError(
            "export_saved_model expects one (batch, num_classes) output. Received: "
            f"output shapes {[tuple(o.shape) for o in model.outputs]}"
        )
    num_classes = output_shape[-1]
    activation = _activation_name(_final_activation(model) or head)
    if activation not in _HEAD_ACTIVATIONS:
        raise ValueError(
            f"The head's classifier_activation must be one of {_HEAD_ACTIVATIONS} "
            f"(or None). Received: classifier_activation={activation!r}"
        )
    if class_names is None:  # the model's own labels (from_huggingface's id2label, timm's)
        class_names = getattr(getattr(model, "config", None), "class_names", None)
    class_names = _check_class_names(class_names)
    if class_names is not None and len(class_names) != num_classes:
        raise ValueError(
            "class_names must have one name per class. "
            f"Received: {len(class_names)} names for num_classes={num_classes}"
        )
    if top_k is None and class_names is not None:
        top_k = min(5, num_classes)
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_classes
    ):
        raise ValueError(
            f"top_k must be an int in [1, num_classes={num_classes}]. Received: top_k={top_k!r}"
        )
    outputs = ["logits", "probabilities"]
    if top_k is not None:
        outputs += ["top_k_indices", "top_k_probabilities"]
    if class_names is not None:
        outputs.append("top_k_classes")
    signatures = list(SIGNATURES)
    if channels not in _DECODE_CHANNELS:
        signatures.remove("serve_bytes")
    if naflex is not None:
        signatures.remove("serve_uint8")  # NaFlex: the dict batch, or encoded images
    return dict(
        naflex=None if naflex is None else tuple(naflex.patch_size),
        max_patches=max_patches,
        image_size=(height, width),
        resize_size=resize_to,
        num_channels=channels,
        num_classes=num_classes,
        activation=activation,
        top_k=top_k,
        class_names=class_names,
        signatures=tuple(signatures),
        outputs=tuple(outputs),
        preprocessing=model_input_spec(model),
    )


def model_input_spec(model):
    """The model's `PreprocessingConfig` (`model.preprocessing`: its `config.preprocessing`, a
    FlexiViT's backbone's), or None (not a keras_vit model: the official `[-1, 1]`)."""
    spec = getattr(model, "preprocessing", None)
    if spec is None:
        spec = getattr(getattr(model, "config", None), "preprocessing", None)
    return spec
