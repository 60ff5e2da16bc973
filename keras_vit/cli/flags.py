"""The flag groups of the `keras-vit` training commands, each defined once: the groups they
share, and each command's own (the model tools' flags are in `keras_vit.cli.tool_flags`,
re-exported here). A flag left out stays None: the recipe's preset, then a
`--config` file, decide its value. Flag names of config keys come from
`keras_vit.runner.flag_names.flag_name` (the one mapping).
"""

from keras_vit.cli.tool_flags import (  # noqa: F401 (re-exports: the model tools' flags)
    CONVERT_SOURCES,
    EXPORT_FORMATS,
    FORMAT_FLAGS,
    OVERWRITE_HELP,
    QUANTIZE_CHOICES,
    convert_flags,
    export_flags,
    inspect_flags,
    weights_flags,
)
from keras_vit.cli.types import (
    augment_list,
    decay_rate,
    float_pair,
    fraction,
    image_size,
    int_list,
    jit_compile,
    job_addresses,
    mesh_shape,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    positive_int_list,
    probability,
    str_list,
)
from keras_vit.runner.flag_names import flag_name


def run_flags(parser):
    """--config, --preset, --smoke, --out, --seed, --overwrite, --mixed-precision."""
    group = parser.add_argument_group("run")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="experiment file (.py with literal RECIPE/PRESET/CONFIG assignments, or .json; "
        "read as data, never executed). Precedence: preset < FILE < --smoke < flags",
    )
    group.add_argument(
        "--preset",
        choices=("digits", "paper"),
        help="config preset: the offline 'digits' default or the paper's numbers",
    )
    group.add_argument(
        "--print-config",
        dest="print_config",
        action="store_true",
        help="print the merged config (preset < FILE < --smoke < flags) as JSON and exit "
        "without loading data or building a model",
    )
    group.add_argument("--smoke", action="store_true", help="tiny model and a few steps (tests)")
    group.add_argument("--out", metavar="DIR", help="output folder (default: runs/COMMAND)")
    group.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    group.add_argument("--seed", type=int)
    group.add_argument(
        "--mixed-precision", dest="mixed_precision", choices=("mixed_bfloat16", "mixed_float16")
    )


def data_flags(parser):
    """Where the images come from and how they are read."""
    group = parser.add_argument_group("data")
    group.add_argument(
        "--dataset",
        help="the data (default: the preset's; digits, offline): digits | folder:PATH | "
        "imagefolder:PATH | tfds:NAME[:SPLIT] | synthetic[:CLASSES[:IMAGES[:SIZE]]] (random "
        "images made in memory, offline; `synthetic` alone is synthetic:10:1024:224)",
    )
    group.add_argument("--data-dir", dest="data_dir", help="TensorFlow Datasets data_dir")
    group.add_argument(
        "--eval-split",
        dest="eval_split",
        help="the test split, evaluated once after training (default: test; tfds datasets "
        "without one: validation)",
    )
    group.add_argument(
        "--download",
        action="store_true",
        default=None,
        help="allow tfds to download and prepare a missing dataset",
    )
    group.add_argument(
        "--on-corrupt",
        dest="on_corrupt",
        choices=("error", "skip"),
        help="corrupt images in folder datasets: stop (default) or skip with a warning",
    )
    group.add_argument("--image-size", dest="image_size", type=image_size, help="N or HxW")
    group.add_argument("--num-channels", dest="num_channels", type=int, choices=(1, 3))
    group.add_argument("--batch-size", dest="batch_size", type=positive_int)


MODEL_SIZE_FLAGS = ("num_layers", "hidden_dim", "mlp_dim", "num_heads")


def model_flags(parser):
    """The variant code and size overrides."""
    group = parser.add_argument_group("model")
    group.add_argument("--model", help="variant code, e.g. B/16, S/16, Ti/4")
    for name in MODEL_SIZE_FLAGS:
        group.add_argument(flag_name(name), dest=name, type=positive_int)


def training_flags(parser):
    """Schedule, optimizer, regularisation, augmentation, compilation, distribution."""
    group = parser.add_argument_group("training")
    group.add_argument(
        "--steps", type=positive_int, help="total optimizer steps (give this or --epochs)"
    )
    group.add_argument("--epochs", type=positive_int, help="passes over the data")
    group.add_argument(
        "--validation-fraction",
        dest="validation_fraction",
        type=probability,
        metavar="F",
        help="share of the training split held out (seeded, stratified by class) for per-epoch "
        "validation and checkpoints/best.keras when the dataset has no validation split of its "
        "own; 0: no validation split (and no best.keras). The test split is evaluated once, "
        "after training (default 0.1; runs without per-epoch validation hold out nothing)",
    )
    group.add_argument(
        "--steps-per-epoch",
        dest="steps_per_epoch",
        type=positive_int,
        help="cap on batches per epoch (default: one pass over the data)",
    )
    group.add_argument(
        flag_name("learning_rate"), dest="learning_rate", type=positive_float, help="peak LR"
    )
    group.add_argument("--weight-decay", dest="weight_decay", type=nonnegative_float)
    group.add_argument("--warmup-steps", dest="warmup_steps", type=nonnegative_int)
    group.add_argument(
        flag_name("gradient_accumulation_steps"),
        dest="gradient_accumulation_steps",
        type=positive_int,
        help="gradient accumulation steps (effective batch = batch x this)",
    )
    group.add_argument("--label-smoothing", dest="label_smoothing", type=probability)
    group.add_argument(flag_name("dropout_rate"), dest="dropout_rate", type=probability)
    group.add_argument(
        flag_name("drop_path_rate"),
        dest="drop_path_rate",
        type=probability,
        help="stochastic depth: the last block's rate, rising linearly from 0 over the blocks "
        "(DeiT, BEiT, MAE fine-tuning; default 0)",
    )
    group.add_argument(
        "--pooling",
        choices=("token", "gap"),
        help="pretrain / finetune: the head's pooling (finetune default: the --init model's, "
        "else token; MAE's fine-tuning: gap with --fc-norm)",
    )
    group.add_argument(
        "--fc-norm",
        dest="fc_norm",
        action="store_true",
        default=None,
        help="pretrain / finetune: a LayerNorm on the pooled vector instead of the final norm "
        "(MAE's and BEiT's fine-tuning heads)",
    )
    group.add_argument(
        flag_name("patch_dropout_rate"),
        dest="patch_dropout_rate",
        type=fraction,
        help="pretrain / finetune: share of each image's patch tokens dropped in training "
        "(patch dropout, FLIP; default 0)",
    )
    group.add_argument(
        "--remat",
        action="store_true",
        default=None,
        help="rematerialise each transformer block in the backward pass: less activation "
        "memory for about one more forward pass of compute",
    )
    group.add_argument(
        "--jit-compile",
        dest="jit_compile",
        type=jit_compile,
        help="auto (Keras' choice: no XLA for TensorFlow on a CPU-only machine) | true (XLA on "
        "TensorFlow and JAX, torch.compile on PyTorch) | false",
    )
    group.add_argument(
        "--steps-per-execution",
        dest="steps_per_execution",
        type=positive_int,
        help="training steps per call of the compiled train function (Keras' "
        "steps_per_execution; default 1): more cuts per-step host overhead on a fast GPU",
    )
    group.add_argument(
        "--augment",
        type=augment_list,
        help="comma list of randaugment, random_erasing, mixup, cutmix, random_rotation, "
        "random_translation, random_zoom, and keras-cv layers (the cv extra) by name: "
        "keras_cv.GridMask, 'keras_cv.RandAugment(magnitude=0.3)' (literal arguments only; "
        "images are in [0, 255] there, value_range defaults to (0, 255)); none (or an empty "
        "value) clears the config's list",
    )
    crops = (
        ("crop_scale", "MIN,MAX area fraction of the random resized crop (e.g. 0.08,1)"),
        ("crop_ratio", "MIN,MAX aspect ratio of the random resized crop (e.g. 0.75,1.33)"),
    )
    for dest, help_text in crops:
        group.add_argument(flag_name(dest), dest=dest, type=float_pair, help=help_text)
    group.add_argument(
        "--rotation",
        type=nonnegative_float,
        help="rotate each training crop by a random angle in +-DEG degrees",
    )
    group.add_argument("--no-flip", dest="flip", action="store_false", default=None)
    group.add_argument(
        "--distribution",
        choices=("none", "data_parallel", "model_parallel", "fsdp", "tensor_parallel", "fsdp_tp"),
        help="keras.distribution on JAX (data_parallel also tf.distribute on TensorFlow); fsdp, "
        "tensor_parallel and fsdp_tp shard the model (keras_vit.distribution, JAX)",
    )
    group.add_argument(
        "--mesh",
        type=mesh_shape,
        metavar="BATCHxMODEL",
        help="the device mesh of --distribution fsdp, tensor_parallel or fsdp_tp, e.g. 2x4 "
        "(default: every device on the strategy's axis)",
    )
    group.add_argument(
        "--model-parallel-size",
        dest="model_parallel_size",
        type=positive_int,
        help="devices per model replica of --distribution model_parallel (default: all)",
    )
    group.add_argument("--verbose", choices=("auto", "0", "1", "2"), help="Keras fit verbosity")



def flexi_flags(parser):
    """FlexiViT training (pretrain and finetune)."""
    group = parser.add_argument_group("FlexiViT")
    group.add_argument(
        "--patch-sizes",
        dest="patch_sizes",
        type=positive_int_list,
        metavar="P,P,...",
        help="train one set of weights at a patch size drawn per batch from this list "
        "(keras_vit.FlexiViT; each must divide the image size); the model's own patch size "
        "is the base kernel and the evaluation size",
    )


def cluster_flags(parser):
    """Several processes (machines) training one model: JAX's runtime via Keras."""
    group = parser.add_argument_group(
        "several machines (JAX)",
        "Run the same command in every process; flags left out are read from Keras' "
        "KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES and "
        "KERAS_DISTRIBUTION_PROCESS_ID. Needs --distribution; --batch-size is the global batch.",
    )
    group.add_argument(
        "--job-addresses",
        dest="job_addresses",
        type=job_addresses,
        metavar="HOST:PORT",
        help="the coordinator (process 0) address, reachable from every process",
    )
    group.add_argument("--num-processes", dest="num_processes", type=positive_int)
    group.add_argument(
        "--process-id", dest="process_id", type=nonnegative_int, help="0 .. num-processes - 1"
    )
    group.add_argument(
        flag_name("multi_host"),
        dest="multi_host",
        action="store_true",
        default=None,
        help="join the processes JAX finds in the environment (Cloud TPU pod, SLURM, Open MPI, "
        "Kubernetes) without the flags above",
    )
    group.add_argument(
        "--init-timeout",
        dest="init_timeout",
        type=positive_int,
        metavar="SECONDS",
        help="longest wait for the coordinator and all processes to connect (default 300)",
    )


def fewshot_flags(parser):
    group = parser.add_argument_group("few-shot")
    group.add_argument(
        "--model-path",
        dest="model_path",
        metavar="MODEL.keras",
        help="the trained model to evaluate. Without it, fewshot first pre-trains one with "
        "`keras-vit pretrain`'s digits preset (minutes) into OUT/pretrain, and says so",
    )
    group.add_argument("--shots", type=positive_int_list, help="comma list, e.g. 1,5,10,25")
    group.add_argument("--seeds", type=int_list, help="comma list of sampling seeds")


def finetune_flags(parser):
    group = parser.add_argument_group("initialisation")
    group.add_argument(
        "--init",
        metavar="CHECKPOINT",
        help="the checkpoint to start from, resized to --image-size with a new zero head: a "
        ".keras model (ours or converted), a Hugging Face save_pretrained folder, or a timm "
        "checkpoint file (.safetensors, .bin, .pth) with --timm-name",
    )
    group.add_argument(
        "--timm-name",
        dest="timm_name",
        metavar="NAME",
        help="the timm model name of a timm --init file, e.g. vit_base_patch16_224.augreg_in21k",
    )
    group.add_argument("--weights", metavar="FILE.npz", help="official ViT .npz checkpoint")
    group = parser.add_argument_group("NaFlex (images at their own aspect ratio)")
    group.add_argument(
        "--naflex",
        action="store_true",
        default=None,
        help="fine-tune a NaFlex model (a plain --init becomes its NaFlex twin) on images "
        "kept at their aspect ratio, no resize to a square; needs --max-patches",
    )
    group.add_argument(
        "--max-patches",
        dest="max_patches",
        type=positive_int,
        metavar="N",
        help="patch budget per image of --naflex batches (the padded sequence length)",
    )
    group = parser.add_argument_group("LoRA (keras_vit.enable_lora)")
    group.add_argument(
        "--lora-rank",
        type=positive_int,
        metavar="N",
        help="fine-tune rank-N LoRA adapters and the head only, the encoder frozen",
    )
    group.add_argument(
        "--lora-targets",
        type=str_list,
        metavar="NAMES",
        help="comma list of the blocks' layers to adapt: query, key, value, attention_output, "
        "and the MLP's mlp_dense_1, mlp_dense_2 (GELU MLP) or mlp_gate, mlp_up, mlp_down "
        "(SwiGLU MLP: EVA-02, DINOv3+, AIMv2; default query,value)",
    )
    group.add_argument(
        "--lora-alpha",
        type=positive_float,
        metavar="ALPHA",
        help="the adapters' scale is ALPHA / N (default N: scale 1)",
    )
    group = parser.add_argument_group("quantization-aware training (keras_vit.quantization_aware)")
    group.add_argument(
        "--qat",
        action="store_true",
        default=None,
        help="fine-tune with fake-quantized int8 inputs and weights (straight-through); export "
        "the integer model with keras-vit export model.keras model.onnx",
    )
    group.add_argument(
        "--qat-weight-bits",
        dest="qat_weight_bits",
        type=positive_int,
        metavar="B",
        help="bits of the fake-quantized weights with --qat, 2..8 (default 7: exact in "
        "onnxruntime on CPUs without VNNI; 8 for VNNI / AMX / Arm)",
    )


def toolkit_flags(parser):
    """Layer-wise learning-rate decay, weight EMA and repeated augmentation."""
    group = parser.add_argument_group("fine-tuning toolkit (timm --layer-decay, --model-ema)")
    group.add_argument(
        "--layer-decay",
        dest="layer_decay",
        type=decay_rate,
        metavar="RATE",
        help="block i of L trains at lr * RATE**(L - i), the embeddings at RATE**(L + 1), the "
        "head at lr (BEiT); no weight decay on norms, biases, tokens, position embeddings",
    )
    group.add_argument(
        "--ema",
        type=probability,
        metavar="MOMENTUM",
        help="keep a moving average of the weights (e.g. 0.999); the run's model is the average",
    )
    group.add_argument(
        "--repeated-augmentation",
        dest="repeated_augmentation",
        type=positive_int,
        metavar="N",
        help="each image N times per batch under different augmentations (DeiT); N divides "
        "--batch-size",
    )


def distillation_flags(parser):
    group = parser.add_argument_group("distillation (DeiT, through the distillation token)")
    group.add_argument(
        "--teacher", metavar="FILE.keras", help="teacher model predicting the same classes"
    )
    group.add_argument(
        "--distillation",
        choices=("hard", "soft"),
        help="hard: CE on the teacher's argmax; soft: KL at temperature --distillation-tau",
    )
    group.add_argument(
        "--distillation-tau",
        dest="distillation_tau",
        type=positive_float,
        metavar="TAU",
        help="soft distillation's temperature (default 1)",
    )


def mpp_flags(parser):
    group = parser.add_argument_group("masked patch prediction")
    group.add_argument(
        "--target",
        choices=("color", "downsampled", "pixels"),
        help="3-bit mean colour (default), 4x4 downsized patch, or L2 on pixels",
    )
    shares = (
        ("corruption_rate", "share of patches corrupted per image (default 0.5)"),
        ("mask_fraction", "share of corrupted patches given the mask embedding (default 0.8)"),
        ("random_fraction", "share given another patch's embedding (default 0.1)"),
    )
    for dest, help_text in shares:
        group.add_argument(flag_name(dest), dest=dest, type=fraction, help=help_text)



def mae_flags(parser):
    group = parser.add_argument_group("masked autoencoder")
    group.add_argument(
        "--mask-ratio",
        dest="mask_ratio",
        type=fraction,
        help="share of each image's patches dropped before the encoder (default 0.75)",
    )
    group.add_argument(
        "--norm-pix-loss",
        dest="norm_pix_loss",
        action="store_true",
        default=None,
        help="targets normalised per patch (the paper preset's default)",
    )
    sizes = (
        ("decoder_hidden_dim", "decoder width (paper 512)"),
        ("decoder_num_layers", "decoder blocks (paper 8)"),
        ("decoder_num_heads", "decoder heads (paper 16)"),
        ("decoder_mlp_dim", "decoder MLP width (paper 2048)"),
    )
    for dest, help_text in sizes:
        group.add_argument(flag_name(dest), dest=dest, type=positive_int, help=help_text)


def quickstart_flags(parser):
    from keras_vit.runner.quickstart_defaults import DEFAULTS

    parser.add_argument(
        "--out", default=None,
        help="output folder (model.keras, metrics.json); default runs/quickstart/BACKEND, one "
        "per backend"
    )
    parser.add_argument("--epochs", type=positive_int, default=DEFAULTS["epochs"])
    parser.add_argument(
        "--warmup-epochs",
        type=positive_int,
        help="warm-up epochs, fewer than --epochs (default: 5%% of the run, 3 of the default "
        "60 epochs; it scales with --epochs)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULTS["batch_size"])
    parser.add_argument("--lr", type=positive_float, default=DEFAULTS["learning_rate"])
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    parser.add_argument(
        "--validation-fraction",
        type=probability,
        default=DEFAULTS["validation_fraction"],
        metavar="F",
        help="share of the training digits held out (stratified, seed 0) and validated on after "
        "every epoch; 0: none (the test split is evaluated once, after training)",
    )
    parser.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="fit verbosity")
