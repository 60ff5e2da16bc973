"""SavedModel export for TensorFlow Serving, from a model trained on any backend.

`export_saved_model` writes a SavedModel with three serving signatures:

- `serving_default`: float32 images `(B, H, W, C)` already in the model's input
  range (see `keras_vit.preprocess_input(images, model=model)`: [-1, 1] by default);
- `serve_uint8`: uint8 images `(B, H, W, C)` with values 0..255, scaled
  `x / 127.5 - 1` inside the graph (a model with its own input spec: its mean and std);
- `serve_bytes`: a batch of encoded images `(B,)` (JPEG, PNG, GIF or BMP, the
  bytes REST clients send as base64), decoded with `tf.io.decode_image`
  (`expand_animations=False`, the model's number of channels), resized to the
  model's image size with `tf.image.resize(method="bilinear", antialias=False)`
  and scaled `x / 127.5 - 1`, all inside the graph; a model with its own input spec
  (`model.preprocessing`: from timm or transformers) gets that spec's resize, centre crop and
  normalisation instead (as `model.preprocessor`: timm's eval transform).

A model built with `dynamic_image_size=True` is exported with `(None, None, None, C)`
image signatures (`serving_default`, `serve_uint8`: any size the patch divides, one size per
request); `serve_bytes` resizes to the size its position embedding is made for.

Every signature returns `logits` and `probabilities` (plus `top_k_indices`,
`top_k_probabilities` and, with class names, `top_k_classes`).

This module is TensorFlow by nature: TensorFlow is imported only inside the
functions that need it. The graph is always built by the TensorFlow backend of
Keras: under the TensorFlow backend in this process; under JAX or PyTorch the
model is saved to a temporary `.keras` file (weights load identically on every
backend) and exported by a child process running with `KERAS_BACKEND=tensorflow`
(`keras_vit.export._tf_subprocess`). The result is a plain TensorFlow graph (no
`XlaCallModule` pinned to the exporting platform, as a `jax2tf` export would
have), loadable by TF Serving on CPU or GPU and by any process that imports only
TensorFlow.
"""

import dataclasses
import logging
import os

import keras

from keras_vit.export import _checks
from keras_vit.export._tf_subprocess import run_with_tensorflow
from keras_vit.export.model_precision import check_saved_model, saved_model_copy
from keras_vit.export.naflex_serving import naflex_endpoints
from keras_vit.export.precision import (
    SAVED_MODEL_PRECISIONS,
    check_precision,
    warn_if_slow,
    write_saved_model_info,
)
from keras_vit.export.serving_spec import (  # noqa: F401  (read_class_names, SIGNATURES: here too)
    SIGNATURES,
    _check_class_names,
    _final_activation,
    read_class_names,
    serving_spec,
)
from keras_vit.layers.fake_quant import QuantizationAware
from keras_vit.saving import atomic_write

logger = logging.getLogger(__name__)

RESIZE_METHOD = "bilinear"
METHODS = _checks.METHODS


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What `export_saved_model` wrote and how.

    Attributes:
        path: str. The SavedModel folder (`EXPORT_DIR/VERSION` with a version).
        method: str. `"in_process"` (traced by the TensorFlow backend in this
            process) or `"subprocess"` (a child process with
            `KERAS_BACKEND=tensorflow` loaded a `.keras` file and traced it).
        backend: str. The Keras backend of the calling process.
        signatures: tuple of str. The signature names in the SavedModel.
        outputs: tuple of str. The output names of every signature (of the
            ONNX graph for `export_onnx`).
        format: str. `"saved_model"`, `"onnx"` or `"litert"`.
        quantize: optional str. The LiteRT quantization mode (`export_litert`).
        inputs: tuple of str. The input names of an ONNX or LiteRT export (else empty).
        precision: str. What the SavedModel or ONNX graph computes in: `"float32"`,
            `"bfloat16"`, `"float16"` or `"int8"` (`precision=`; LiteRT: `quantize`).
        quantization: optional str. How an int8 export was quantized: `"dynamic"`,
            `"static_qdq"`, `"qat_qdq"` (ONNX) or `"keras_int8"` (SavedModel).
    """

    path: str
    method: str
    backend: str
    signatures: tuple
    outputs: tuple
    format: str = "saved_model"
    quantize: str = None
    inputs: tuple = ()
    precision: str = "float32"
    quantization: str = None

    def describe(self):
        how = (
            "traced in this process by the TensorFlow backend"
            if self.method == "in_process"
            else f"model saved as .keras under the {self.backend} backend, "
            "traced by a subprocess with KERAS_BACKEND=tensorflow"
        )
        inputs = f"Input{'s' * (len(self.inputs) > 1)}: {', '.join(self.inputs)}."
        if self.precision != "float32":
            scheme = f", {self.quantization}" if self.quantization else ""
            how = f"{how}; precision {self.precision}{scheme}"
        if self.format == "onnx":
            return (
                f"Exported ONNX model to {self.path} ({how}). "
                f"{inputs} Outputs: {', '.join(self.outputs)}."
            )
        if self.format == "litert":
            return (
                f"Exported LiteRT model to {self.path} ({how}; quantize={self.quantize}). "
                f"Signature: serving_default. {inputs} Outputs: {', '.join(self.outputs)}."
            )
        return (
            f"Exported SavedModel to {self.path} ({how}). "
            f"Signatures: {', '.join(self.signatures)}. Outputs: {', '.join(self.outputs)}."
        )

    def announce(self, verbose):
        """Logs `describe()` on the `keras_vit.export` logger, and prints it when `verbose`."""
        logger.info(self.describe())
        if verbose:
            print(self.describe())
        return self


def _target_dir(export_dir, version):
    export_dir = _checks.saving.check_path_argument(export_dir, "export_dir")
    _checks.saving.check_folder_name(export_dir, "a SavedModel (saved_model.pb)", "export_dir")
    if version is None:
        return os.path.abspath(export_dir)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(
            "version must be a non-negative int (TF Serving loads numbered folders "
            f"MODEL_DIR/VERSION). Received: version={version!r}"
        )
    return os.path.abspath(os.path.join(export_dir, str(version)))


def _is_saved_model(path):
    return any(
        os.path.isfile(os.path.join(path, name)) for name in ("saved_model.pb", "saved_model.pbtxt")
    )


def _check_target(target, overwrite):
    """Refuses a non-empty target without `overwrite`, and never deletes a non-SavedModel."""
    _checks.check_writable_parent(target)
    if not os.path.lexists(target):
        return
    if not os.path.isdir(target):
        raise FileExistsError(f"Export target {target!r} exists and is not a folder.")
    if not os.listdir(target):
        return
    if not overwrite:
        raise FileExistsError(
            f"Export folder {target!r} is not empty. Pass overwrite=True "
            "(`--overwrite` on the command line) to replace it, or export to another "
            "version."
        )
    if not _is_saved_model(target):
        raise FileExistsError(
            f"Export folder {target!r} is not empty and holds no saved_model.pb; "
            "refusing to delete it even with overwrite=True."
        )


def _head_logits(head, features):
    """The head's output before its activation (softmax / sigmoid)."""
    if (
        head.quantization_mode is None
        and not getattr(head, "lora_enabled", False)
        and not isinstance(head, QuantizationAware)
    ):
        return keras.ops.add(keras.ops.matmul(features, head.kernel), head.bias)
    # A quantized head (model.quantize) holds an int8 kernel and computes through its own
    # quantized call, a quantization-aware one fake-quantizes its input and kernel: run that
    # call with a linear activation (restored at once; this runs while the endpoint is traced).
    activation = head.activation
    head.activation = keras.activations.get("linear")
    try:
        return head(features)
    finally:
        head.activation = activation


def _write_archive(model, target, spec, info=None):
    """Builds the ExportArchive (TensorFlow backend) and writes it to `target` (with `info`, the
    export record, in its `assets.extra/`)."""
    tf = _checks.import_tensorflow()
    head = model.head
    inputs = model.input if spec["naflex"] else model.inputs[0]
    logits_model = None
    if spec["activation"] == "linear":
        features_model = None
    elif _final_activation(model) is not None:
        # A distilled model: the logits are the input of the activation after the heads.
        features_model = None
        logits_model = keras.Model(inputs, _final_activation(model).input, name="logits")
    else:
        # Logits are the head's pre-activation: run the model up to the head,
        # then the head's own matmul + bias (the ops Dense uses).
        features_model = keras.Model(inputs, head.input, name="features")
    class_table = None if spec["class_names"] is None else tf.constant(spec["class_names"])

    def heads(images):
        if logits_model is not None:
            logits = logits_model(images, training=False)
            activation = _final_activation(model).activation
            probabilities = tf.cast(activation(logits), tf.float32)
            logits = tf.cast(logits, tf.float32)
        elif features_model is None:
            logits = tf.cast(model(images, training=False), tf.float32)
            probabilities = tf.nn.softmax(logits, axis=-1)
        else:
            features = features_model(images, training=False)
            logits = _head_logits(head, features)
            probabilities = tf.cast(head.activation(logits), tf.float32)
            logits = tf.cast(logits, tf.float32)
        outputs = {"logits": logits, "probabilities": probabilities}
        if spec["top_k"] is not None:
            values, indices = tf.math.top_k(probabilities, k=spec["top_k"])
            outputs["top_k_indices"] = indices
            outputs["top_k_probabilities"] = values
            if class_table is not None:
                outputs["top_k_classes"] = tf.gather(class_table, indices)
        return outputs

    if spec["naflex"]:
        endpoints = naflex_endpoints(tf, heads, spec)
    else:
        endpoints = _image_endpoints(tf, heads, spec)
    archive = keras.export.ExportArchive()
    archive.track(model)
    for name in spec["signatures"]:
        fn, input_specs = endpoints[name]
        archive.add_endpoint(name, fn, input_signature=input_specs)

    def write(path):
        archive.write_out(path, verbose=False)
        if info is not None:
            write_saved_model_info(path, info)

    atomic_write(target, write, "saved_model")


def _image_endpoints(tf, heads, spec):
    """The image signatures (float, uint8 and encoded images resized to the model's size).

    A model with its own input spec (`config.preprocessing` other than `[-1, 1]`) is served
    with it: `serve_uint8` normalises with its mean, std and scale, `serve_bytes` applies its
    resize, centre crop and normalisation (`keras_vit.layers.image_preprocessor`, in TF ops).
    """
    from keras_vit.layers.image_preprocessor import preprocess_images, tf_namespace
    from keras_vit.models.preprocessing_config import PreprocessingConfig
    from keras_vit.preprocessing import preprocess_input

    height, width = spec["resize_size"]
    channels = spec["num_channels"]
    own = spec.get("preprocessing")
    own = None if own is None or own == PreprocessingConfig() else own

    def serving_default(images):
        return heads(images)

    def serve_uint8(images):
        return heads(preprocess_input(images, model=own) if own else preprocess_input(images))

    def decode_own(image_bytes):
        image = tf.io.decode_image(
            image_bytes, channels=channels, dtype=tf.uint8, expand_animations=False
        )
        image = preprocess_images(
            image, (height, width), xp=tf_namespace(tf), **own.layer_arguments()
        )
        return tf.ensure_shape(image, (height, width, channels))

    def decode(image_bytes):
        image = tf.io.decode_image(
            image_bytes, channels=channels, dtype=tf.uint8, expand_animations=False
        )
        image = tf.image.resize(image, (height, width), method=RESIZE_METHOD, antialias=False)
        return tf.ensure_shape(image, (height, width, channels))

    def serve_bytes(image_bytes):
        images = tf.map_fn(
            decode_own if own else decode,
            image_bytes,
            fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32),
        )
        return heads(images if own else preprocess_input(images))

    image_shape = (None, *spec["image_size"], channels)
    return {
        "serving_default": (serving_default, [tf.TensorSpec(image_shape, tf.float32)]),
        "serve_uint8": (serve_uint8, [tf.TensorSpec(image_shape, tf.uint8)]),
        "serve_bytes": (serve_bytes, [tf.TensorSpec((None,), tf.string)]),
    }


def _write_saved_model(
    model, target, *, overwrite, class_names, top_k, max_patches=None, precision=None
):
    """Checks and writes the SavedModel (TensorFlow backend); returns what it holds, as JSON."""
    model, info = saved_model_copy(model, precision)
    spec = serving_spec(model, class_names, top_k, max_patches)
    _check_target(target, overwrite)
    _write_archive(model, target, spec, info)
    return dict(
        signatures=list(spec["signatures"]),
        outputs=list(spec["outputs"]),
        precision=info["precision"],
        quantization=info.get("quantization"),
    )


def export_saved_model(
    model,
    export_dir,
    *,
    version=None,
    overwrite=False,
    class_names=None,
    top_k=None,
    method="auto",
    verbose=True,
    max_patches=None,
    precision=None,
):
    """Exports a ViT classifier as a TensorFlow SavedModel for TF Serving.

    Signatures (inputs -> outputs):

    - `serving_default`: `images` float32 `(B, H, W, C)` in [-1, 1];
    - `serve_uint8`: `images` uint8 `(B, H, W, C)`, 0..255, scaled
      `x / 127.5 - 1` in the graph;
    - `serve_bytes`: `image_bytes` string `(B,)` of encoded JPEG/PNG/GIF/BMP
      images, decoded with `tf.io.decode_image(channels=C,
      expand_animations=False)`, resized to `(H, W)` with
      `tf.image.resize(method="bilinear", antialias=False)` and scaled in the
      graph; bytes that are not an image fail that request with a TensorFlow
      `InvalidArgumentError` ("Unknown image file format"). Only exported for
      1, 3 or 4 channels.

    Each returns `logits` and `probabilities` (float32 `(B, K)`: a softmax of
    the logits, or the head's own softmax/sigmoid output when the model was
    built with that `classifier_activation`, never applied twice), and with
    `top_k` or `class_names`: `top_k_indices` (int32 `(B, k)`),
    `top_k_probabilities` (float32 `(B, k)`) and `top_k_classes` (string
    `(B, k)`, with `class_names`).

    The graph is traced by Keras' TensorFlow backend (`keras.export.ExportArchive`).
    Under the TensorFlow backend this happens in this process; under JAX or
    PyTorch the model is saved to a temporary `.keras` file and exported by a
    subprocess with `KERAS_BACKEND=tensorflow`, which needs the model's custom
    layers to be keras_vit's (or otherwise registered on import of keras_vit).

    Quantized models (`model.quantize("int8")` or `"float8"`) export as they
    compute (int8 products in the graph). LoRA adapters (`keras_vit.enable_lora`)
    are folded into the kernels of an exported copy (`keras_vit.merge_lora`);
    the model itself is left as it is.

    `precision` converts a copy before tracing (`keras_vit/export/model_precision.py`):
    `"float32"`, `"bfloat16"` (every layer's policy `bfloat16`: bfloat16 weights, half the
    file, and products, which TensorFlow's oneDNN kernels run natively on CPUs with
    AVX512_BF16 or AMX) or `"int8"` (Keras' int8: int8 kernels with per-channel scales,
    per-token int8 inputs). The signatures stay the same (float32 and uint8 images, encoded
    bytes, the model's own preprocessing; float32 outputs). On a CPU without the instructions
    for it the export warns once: such a SavedModel runs there, slower than float32
    (benchmarks/RESULTS.md). The SavedModel records its precision in
    `assets.extra/keras_vit_export.json` (`keras_vit.export.read_export_info`).

    Args:
        model: a `keras.Model` classifier (built with `include_top=True`, with a
            fixed image size or `dynamic_image_size=True`), or a path to a `.keras`
            file of one, or to a sharded checkpoint folder of one (a sharded run's
            `model.sharded`: read onto one device, one tensor at a time).
        export_dir: str or path. The model folder; with `version`, the SavedModel
            goes to `export_dir/version` (TF Serving's `MODEL_DIR/VERSION`
            layout), else to `export_dir` itself.
        version: optional non-negative int. Defaults to None.
        overwrite: bool. Replace an existing SavedModel in the target folder.
            A non-empty target without it raises `FileExistsError`; a non-empty
            folder that is not a SavedModel is never deleted. Defaults to False.
        class_names: optional sequence of str, one per class; adds
            `top_k_classes`. Defaults to None.
        top_k: optional int in [1, num_classes]; adds `top_k_indices` and
            `top_k_probabilities`. Defaults to `min(5, num_classes)` when
            `class_names` is given, else None.
        method: `"auto"` (in this process under the TensorFlow backend, a
            subprocess otherwise) or `"subprocess"` (always a subprocess).
            Defaults to `"auto"`.
        verbose: bool. Print a line saying where and how the model was
            exported. Defaults to True.
        max_patches: optional int. NaFlex models only: the patch budget of
            `serve_bytes` (and the padded sequence length). Defaults to the
            position table's grid (`rows * columns`).
        precision: None (the model as it computes), `"float32"`, `"bfloat16"` or
            `"int8"`. Defaults to None.

    NaFlex models (`naflex=True`) get two signatures: `serving_default` takes
    the dict batch (`patches` float32 `(B, N, P*P*C)`, `patch_coord` int32
    `(B, N, 2)`, `patch_valid` bool `(B, N)`), and `serve_bytes` encoded images
    of any sizes, each decoded, scaled to [-1, 1], resized keeping its aspect
    ratio to at most `max_patches` patches and patchified in the graph
    (`keras_vit.data.naflex_tf.naflex_example`), equal to `keras_vit.data.naflex_batch`.

    Returns:
        An `ExportResult` (`path`, `method`: `"in_process"` or
        `"subprocess"`, `backend`, `signatures`, `outputs`).

    Raises:
        ValueError: a model without a fixed image size (other than a keras_vit
            `dynamic_image_size` model) or without a `head`
            classifier, or bad `version`/`top_k`/`class_names`.
            Also a model file that is not a valid `.keras` archive, and a
            target under a file.
        FileExistsError: a non-empty target folder without `overwrite=True`.
        FileNotFoundError: a model path that does not exist.
        PermissionError: the target's folder is not writable.
        ImportError: TensorFlow is not installed.

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model = ViT("mu/8", image_size=32, num_classes=10)
    >>> result = export_saved_model(model, "/tmp/vit", version=1,
    ...     overwrite=True)  # doctest: +SKIP
    >>> result.signatures  # doctest: +SKIP
    ('serving_default', 'serve_uint8', 'serve_bytes')

    Reference:
        TF Serving REST API, https://www.tensorflow.org/tfx/serving/api_rest
    """
    _checks.check_method(method)
    overwrite, verbose = _checks.check_flags(overwrite=overwrite, verbose=verbose)
    _checks.import_tensorflow()
    target = _target_dir(export_dir, version)
    _check_target(target, overwrite)
    class_names = _check_class_names(class_names)
    model = _checks.check_model_argument(model)
    if isinstance(model, keras.Model):
        serving_spec(model, class_names, top_k, max_patches)  # fail fast, before saving
        check_saved_model(model, precision)
    else:
        check_precision(precision, SAVED_MODEL_PRECISIONS, "export_saved_model", optional=True)
    warn_if_slow(precision, "tensorflow")
    how, reply = run_with_tensorflow(
        model,
        _write_saved_model,
        dict(target=target, overwrite=overwrite, class_names=class_names, top_k=top_k,
             max_patches=max_patches, precision=precision),
        method=method,
    )
    return ExportResult(
        path=target,
        method=how,
        backend=keras.backend.backend(),
        signatures=tuple(reply["signatures"]),
        outputs=tuple(reply["outputs"]),
        precision=reply["precision"],
        quantization=reply["quantization"],
    ).announce(verbose)
