"""The flags of the `keras-vit` commands that read, convert, export and inspect models
(`convert`, `weights`, `export`, `inspect`); the training commands' groups are in
`keras_vit.cli.flags` (which re-exports these).
"""

from keras_vit.cli.convert_to import add_target_flag
from keras_vit.cli.types import image_size, nonnegative_int, positive_int, probability

# The help of every command's --overwrite that refuses to replace earlier work.
OVERWRITE_HELP = (
    "replace what an earlier run left in the output (by default a command refuses to write "
    "over existing work)"
)


# What `convert` reads, its positional arguments, and the flags only it takes.
CONVERT_SOURCES = {
    "npz": (
        ("CHECKPOINT", "OUTPUT"),
        ("model", "representation_size", "pooling", "source_grid", "no_strict"),
    ),
    "timm": (("NAME", "CHECKPOINT", "OUTPUT"), ()),
    "huggingface": (("FOLDER", "OUTPUT"), ()),
}


def convert_flags(parser):
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="ARG",
        help="CHECKPOINT OUTPUT (an official .npz, e.g. ViT-B_16.npz); with --from timm: NAME "
        "CHECKPOINT OUTPUT (a timm model name and its .safetensors/.pth), or NAME OUTPUT (the "
        "name's weights from the Hugging Face Hub, e.g. vit_small_patch14_dinov2.lvd142m); "
        "with --from huggingface: FOLDER OUTPUT (a transformers save_pretrained folder, or a "
        "Hub repo id such as google/vit-base-patch16-224 or hf://org/repo@revision). OUTPUT "
        "is the .keras file to write",
    )
    parser.add_argument(
        "--from",
        dest="source",
        choices=tuple(CONVERT_SOURCES),
        help="what the checkpoint is: npz (official, default), timm, huggingface",
    )
    add_target_flag(parser)
    parser.add_argument("--model", help="variant code for --from npz, e.g. B/16, L/32, R50+B/16")
    parser.add_argument(
        "--image-size",
        type=image_size,
        help="N or HxW; the position embedding is resampled to it (default: the checkpoint's)",
    )
    parser.add_argument(
        "--num-classes",
        type=positive_int,
        help="classes of the head; another count than the checkpoint's gives a zero head "
        "(default: the checkpoint's)",
    )
    parser.add_argument(
        "--representation-size",
        type=nonnegative_int,
        help="pre_logits width; 0 drops pre_logits (default: the checkpoint's)",
    )
    parser.add_argument(
        "--pooling",
        choices=("token", "gap"),
        help="default: token if the checkpoint has a class token, else gap",
    )
    parser.add_argument("--no-top", action="store_true", help="leave out the classifier head")
    parser.add_argument(
        "--source-grid",
        type=image_size,
        help="HxW patch grid of a non-square checkpoint position embedding",
    )
    parser.add_argument(
        "--no-strict",
        action="store_true",
        help="load what matches instead of failing on missing, unexpected or mis-shaped arrays",
    )
    parser.add_argument(
        "--force-download",
        action="store_true",
        help="with --from timm NAME OUTPUT or --from huggingface REPO_ID OUTPUT: download the "
        "name's files again even when they are in the Hugging Face cache (replacing them)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT")


def weights_flags(parser):
    parser.add_argument("--model", help="variant code, e.g. B/16, R50+B/16")
    parser.add_argument("--fetch", metavar="NAME", help="preset to download")
    parser.add_argument(
        "--base-url",
        help="bucket mirror (https://, http:// or file://); default $KERAS_VIT_WEIGHTS_URL, "
        "else the official bucket",
    )


EXPORT_FORMATS = ("saved_model", "onnx", "litert")

QUANTIZE_CHOICES = ("none", "float16", "dynamic_int8", "int8")
PRECISION_CHOICES = ("float32", "bfloat16", "float16", "int8")
# Flags that some formats only read: (dest, formats).
FORMAT_FLAGS = (
    ("version", ("saved_model",)),
    ("top_k", ("saved_model",)),
    ("class_names", ("saved_model",)),
    ("quantize", ("litert",)),
    ("precision", ("saved_model", "onnx")),
    ("representative_data", ("litert", "onnx")),
    ("representative_samples", ("litert", "onnx")),
)


def export_flags(parser):
    parser.add_argument(
        "model",
        metavar="MODEL.keras",
        help="a model saved with model.save(), or a sharded run's model.sharded folder (read "
        "onto one device, one tensor at a time)",
    )
    parser.add_argument(
        "out",
        metavar="OUT",
        help="TF Serving model folder (saved_model), or the .onnx / .tflite file to write",
    )
    parser.add_argument(
        "--format",
        choices=EXPORT_FORMATS,
        help="saved_model (TF Serving), onnx or litert (.tflite). Default: litert for an OUT "
        "ending in .tflite, onnx for .onnx, else saved_model",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing export at OUT"
    )
    parser.add_argument(
        "--max-patches",
        dest="max_patches",
        type=positive_int,
        metavar="N",
        help="NaFlex models, saved_model and litert only: the patch budget of serve_bytes, or "
        "the .tflite's fixed sequence length (default: the position table's grid)",
    )
    group = parser.add_argument_group("saved_model")
    group.add_argument(
        "--version",
        type=nonnegative_int,
        metavar="N",
        help="write to OUT/N (TF Serving's MODEL_DIR/VERSION layout)",
    )
    group.add_argument(
        "--top-k",
        type=positive_int,
        metavar="K",
        help="add top_k_indices and top_k_probabilities outputs (default 5 with --class-names)",
    )
    group.add_argument(
        "--class-names",
        metavar="FILE",
        help="text file with one class name per line, in class-index order; adds top_k_classes",
    )
    group = parser.add_argument_group("saved_model and onnx")
    group.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        help="what the exported graph computes in (default: as the model computes): float32, "
        "bfloat16 (saved_model: fast on CPUs with AVX512_BF16 / AMX), float16 (onnx: half "
        "the file, for GPUs) or int8 (onnx: onnxruntime's quantizer, dynamic, or static with "
        "--representative-data; a quantization-aware model's learned ranges; saved_model: "
        "Keras' int8)",
    )
    group = parser.add_argument_group("litert")
    group.add_argument(
        "--quantize",
        choices=QUANTIZE_CHOICES,
        help="none (float32, the default), float16 (float16 weights), dynamic_int8 "
        "(dynamic-range: int8 weights) or int8 (full integer; needs --representative-data)",
    )
    group.add_argument(
        "--representative-data",
        dest="representative_data",
        metavar="DATA",
        help="calibration images for --quantize int8 (litert) or --precision int8 (onnx: "
        "static quantization): a dataset spec (digits, folder:PATH, "
        "imagefolder:PATH, tfds:NAME) or a .npy/.npz file of (N, H, W, C) images (uint8 "
        "0..255, or floats in [-1, 1])",
    )
    group.add_argument(
        "--representative-samples",
        dest="representative_samples",
        type=positive_int,
        metavar="N",
        help="images drawn from a dataset spec for calibration (default: 200)",
    )


def inspect_flags(parser):
    parser.add_argument("model", help="saved model (.keras) built with keras_vit")
    parser.add_argument(
        "--image", required=True, help="image file (PNG, JPEG, ...) to compute the attention on"
    )
    parser.add_argument("--out", required=True, help="output folder for the PNG files")
    parser.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    parser.add_argument(
        "--head-fusion",
        default="mean",
        choices=("mean", "max", "min"),
        help="how the rollout fuses heads (default: mean)",
    )
    parser.add_argument(
        "--discard-ratio",
        type=probability,
        default=0.0,
        help="fraction of the lowest attention weights dropped per layer in the rollout "
        "(default: 0)",
    )
    parser.add_argument(
        "--num-filters",
        type=positive_int,
        default=28,
        help="principal components of the patch embedding to draw (default: 28)",
    )
