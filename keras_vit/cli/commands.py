"""What each `keras-vit` command does: its run function (its flags are in `keras_vit.cli.flags`).

A run function takes the parsed arguments, does the work (importing what it
needs only then) and returns an exit code. Errors are raised, never printed
here: `keras_vit.cli.app.main` turns them into one message and an exit code.
The table of commands is `keras_vit.cli.app.COMMANDS`.
"""

import importlib.util
import os

from keras_vit.cli import convert_to
from keras_vit.cli import flags as F
from keras_vit.cli.extras import require


def load_model(path):
    """Loads a `.keras` model for a command (`keras_vit.saving.load_model`: `compile=False`)."""
    from keras_vit.saving import load_model as load

    return load(path)


# --- recipes --------------------------------------------------------------------------------


def _dataset_modules(dataset):
    kind = str(dataset or "").split(":", 1)[0]
    return {"digits": ("sklearn",), "tfds": ("tensorflow_datasets",)}.get(
        kind, ("tensorflow_datasets",) if kind == "imagefolder" else ()
    )


def _recipe_config(name, args):
    """The checked config of a recipe command, then its module: every value is checked before
    a framework is imported (`keras_vit.runner.checks`, `keras_vit.cli.applicable`), so a bad
    one is refused within a second, `--print-config` included."""
    from keras_vit.cli.applicable import check_applicable
    from keras_vit.cli.config import config_from_args, explicit_keys
    from keras_vit.runner import presets
    from keras_vit.runner.checks import check_finite, check_recipe_config

    recipe = name.replace("-", "_")
    config = config_from_args(presets.recipe(recipe), name, args)
    print_config = getattr(args, "print_config", False)
    check_applicable(name, config, explicit_keys(args), print_config=print_config)
    if recipe == "fewshot":
        check_finite(config)
    else:
        check_recipe_config(recipe, config, files=not print_config)
    if print_config:
        import json

        from keras_vit.runner.config import jsonable

        print(json.dumps(jsonable(config), indent=2))
        return None, None
    require(*_dataset_modules(config.get("dataset")), *_augment_modules(config.get("augment")))
    return importlib.import_module(f"keras_vit.runner.{recipe}"), config


def _augment_modules(specs):
    """("keras_cv",) when an augmentation names a keras-cv layer (`keras_cv.GridMask`)."""
    from keras_vit.training.cv_augment import is_keras_cv_spec

    names = [s[0] if isinstance(s, (tuple, list)) and s else s for s in specs or ()]
    return ("keras_cv",) if any(is_keras_cv_spec(name) for name in names) else ()


def run_training(args):
    """pretrain, finetune and pretrain-mpp: the recipe config, then `module.run(config)`."""
    module, config = _recipe_config(args.command, args)
    if config is not None:  # None: --print-config printed it
        module.run(config)
    return 0


def run_fewshot(args):
    module, config = _recipe_config("fewshot", args)
    if config is None:  # --print-config printed it
        return 0
    pretrain_config = None
    if not config["model_path"]:
        require("tensorboard", "sklearn")  # the default pretrain run comes first
        from keras_vit.runner import presets

        pretrain_config = presets.get_config("pretrain", smoke=args.smoke)
        pretrain_config["seed"] = config["seed"]
    elif not os.path.isfile(config["model_path"]):
        raise FileNotFoundError(
            f"Model file not found: {config['model_path']!r} (--model-path). Expected a .keras "
            "file, or leave --model-path out to pre-train one first."
        )
    module.run(config, pretrain_config=pretrain_config)
    return 0


def run_quickstart(args):
    from keras_vit.runner.checks import check_config
    from keras_vit.runner.quickstart_defaults import quickstart_config

    overrides = dict(
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
        validation_fraction=args.validation_fraction,
    )
    if args.warmup_epochs is not None:
        overrides["warmup_epochs"] = args.warmup_epochs
    config = quickstart_config(args.out, args.verbose, **overrides)
    check_config(config)  # before a framework is imported
    if config["warmup_epochs"] is not None and config["warmup_epochs"] >= config["epochs"]:
        raise ValueError(
            f"--warmup-epochs ({config['warmup_epochs']}) must be fewer than --epochs "
            f"({config['epochs']}): lower --warmup-epochs or train longer."
        )
    from keras_vit.runner import quickstart

    if args.overwrite:
        overrides["overwrite"] = True  # quickstart.train refuses settings it does not know
    metrics = quickstart.train(out_dir=args.out, verbose=args.verbose, **overrides)
    print(
        f"backend={metrics['backend']} test_accuracy={metrics['test_accuracy']:.4f} "
        f"({metrics['test_examples']} held-out digits) time={metrics['seconds']:.1f}s "
        f"params={metrics['parameters']:,} saved={metrics['model_path']}"
    )
    return 0


def _show_loader_log():
    """Prints the loader's log lines (head kept, pre_logits dropped, grid resized) to stderr."""
    import logging
    import sys

    class _Stderr(logging.Handler):  # looks sys.stderr up at each line (it may be replaced)
        def emit(self, record):
            print(self.format(record), file=sys.stderr)

    for name in ("keras_vit.weights",):  # the loaders log on keras_vit.weights.{npz,timm,...}
        log = logging.getLogger(name)
        if not any(type(h).__name__ == "_Stderr" for h in log.handlers):
            log.addHandler(_Stderr())
            log.setLevel(logging.INFO)


def _convert_arguments(args):
    """The positional arguments of `convert` for its `--from`, checked (ValueError: exit 2)."""
    names, own_flags = F.CONVERT_SOURCES[args.source]
    if args.source == "timm" and len(args.paths) == 2:  # NAME OUTPUT: the Hub's weights
        names = ("NAME", "OUTPUT")
    if len(args.paths) != len(names):
        hub = (
            " (or 2, NAME OUTPUT: the name's weights from the Hub)" if args.source == "timm" else ""
        )
        raise ValueError(
            f"convert --from {args.source} expects {len(names)} arguments, "
            f"{' '.join(names)}{hub}; received {len(args.paths)}: {' '.join(args.paths)}"
        )
    for source, (_, flags) in F.CONVERT_SOURCES.items():
        for flag in flags:
            value = getattr(args, flag)
            if source != args.source and value is not None and value is not False:
                raise ValueError(
                    f"{F.flag_name(flag)} applies to "
                    f"--from {source} only; received it with --from {args.source}"
                )
    if getattr(args, "force_download", False) and (
        args.source == "npz" or (args.source == "timm" and "CHECKPOINT" in names)
    ):
        what = "an official .npz" if args.source == "npz" else "a timm CHECKPOINT file"
        raise ValueError(
            "--force-download downloads a name from the Hugging Face Hub again (--from timm "
            f"NAME OUTPUT, --from huggingface REPO_ID OUTPUT); received {what}: "
            f"{' '.join(args.paths)}"
        )
    if args.source == "npz" and not args.model:
        raise ValueError(
            "convert --from npz needs --model (the variant code, e.g. --model B/16); received none"
        )
    return dict(zip(names, args.paths, strict=True))


def sniff_checkpoint(path):
    """What a file or folder holds, by its content: `"npz"`, `"safetensors"`, `"torch"`,
    `"keras"`, `"huggingface"` (a folder with config.json), or None (unknown / missing)."""
    import struct
    import zipfile

    if os.path.isdir(path):
        return "huggingface" if os.path.isfile(os.path.join(path, "config.json")) else None
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] < 1 << 27:
        return "safetensors"
    if head.startswith(b"\x80"):  # a pickle (a legacy torch.save file)
        return "torch"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        if "config.json" in names and any(n.endswith(".h5") or "weights" in n for n in names):
            return "keras"
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if all(n.endswith(".npy") for n in names):
            return "npz"
    return None


def _check_npz_checkpoint(paths):
    """`convert` without --from reads an official .npz: refuses other content, naming its flag."""
    advice = {
        "safetensors": "a safetensors state dict (timm): use --from timm NAME CHECKPOINT OUTPUT",
        "torch": "a PyTorch checkpoint (timm): use --from timm NAME CHECKPOINT OUTPUT",
        "huggingface": "a Hugging Face folder: use --from huggingface FOLDER OUTPUT",
        "keras": "a .keras model: use --to timm or --to huggingface to write it for PyTorch",
    }
    for path in paths[:-1]:  # every input (the last path is the output)
        found = sniff_checkpoint(path)
        if found in advice:
            raise ValueError(
                f"convert without --from reads an official .npz checkpoint (--from npz); "
                f"CHECKPOINT {path!r} is {advice[found]}."
            )


def run_convert(args):
    from keras_vit.weights import convert

    if args.target is not None:
        return convert_to.run_convert_to(args)
    if args.source is None:
        _check_npz_checkpoint(args.paths)
    args.source = args.source or "npz"
    paths = _convert_arguments(args)
    _show_loader_log()
    common = dict(
        image_size=args.image_size,
        num_classes=args.num_classes,
        overwrite=args.overwrite,
    )
    if args.source == "npz":
        model = convert.convert_checkpoint(
            paths["CHECKPOINT"],
            paths["OUTPUT"],
            model=args.model,
            representation_size=args.representation_size,
            pooling=args.pooling,
            include_top=not args.no_top,
            strict=not args.no_strict,
            source_grid=args.source_grid,
            **common,
        )
    else:
        if args.no_top:
            common["include_top"] = False
        if args.force_download:
            common["force_download"] = True
        if args.source == "timm":
            model = convert.convert_timm(
                paths["NAME"], paths.get("CHECKPOINT"), paths["OUTPUT"], **common
            )
        else:
            model = convert.convert_huggingface(paths["FOLDER"], paths["OUTPUT"], **common)
    print(f"Wrote {paths['OUTPUT']}: {model_summary(model)}")
    return 0


def model_summary(model):
    """`name, input (...), output (...), N parameters` of any model a checkpoint converts to.

    A model without a functional graph (a `MaskedAutoencoder` from a `vit_mae` folder) has no
    `input_shape`: it is described by its encoder's (the summary ended the command with an
    AttributeError after the file was written).

    Example:

    >>> from keras_vit.models.vit import ViT
    >>> model_summary(ViT("mu/8", image_size=16, num_classes=2, name="tiny"))
    'tiny, input (16, 16, 3), output (2,), 23,586 parameters'
    """
    name, size = model.name, f"{model.count_params():,} parameters"
    if getattr(model, "inputs", None):
        return f"{name}, input {model.input_shape[1:]}, output {model.output_shape[1:]}, {size}"
    encoder = getattr(model, "encoder", None)
    if getattr(encoder, "inputs", None):
        return (
            f"{name} (a {type(model).__name__}), encoder input {encoder.input_shape[1:]}, "
            f"encoder output {encoder.output_shape[1:]}, {size}"
        )
    return f"{name} (a {type(model).__name__}), {size}"


def _format_table(rows):
    header = ("variant", "weights", "px", "classes", "pre_logits", "top-1", "trained on")
    lines = [header] + [
        (
            p.variant,
            p.name,
            str(p.image_size),
            str(p.num_classes),
            "yes" if p.pre_logits else "no",
            f"{p.top1:.2f}" if p.top1 is not None else "-",
            p.trained_on,
        )
        for p in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True))
        + "  "
        + line[-1]
        for line in lines
    )


def run_weights(args):
    from keras_vit.weights.presets import catalogue as presets

    if args.fetch:
        if not args.model:
            raise ValueError(
                f"--fetch needs --model to name the variant; received --fetch {args.fetch} alone. "
                "Add e.g. --model B/16 (keras-vit weights lists the names)."
            )
        print(presets.get_preset_file(args.fetch, args.model, base_url=args.base_url))
        return 0
    rows = presets.list_presets(args.model)
    print(_format_table(rows))
    if rows:
        base = presets.resolve_base_url(args.base_url)
        cache = os.path.join(presets.cache_root(), presets.CACHE_SUBDIR)
        print(f"\nFiles: {base}<path>; cache: {cache}/<path>")
    return 0


_SUFFIX_FORMATS = {".tflite": "litert", ".onnx": "onnx"}


def export_format(args):
    """`--format`, or the format OUT's suffix names (`.tflite`, `.onnx`), else saved_model."""
    if args.format is not None:
        return args.format
    suffix = os.path.splitext(args.out.rstrip("/" + os.sep))[1].lower()
    return _SUFFIX_FORMATS.get(suffix, "saved_model")


def run_export(args):
    from keras_vit.distribution.checkpoint_files import is_sharded_checkpoint

    if not (os.path.isfile(args.model) or is_sharded_checkpoint(args.model)):
        raise FileNotFoundError(
            f"Model file not found: {args.model!r}. Expected a .keras file or a sharded run's "
            "checkpoint folder (model.sharded, holding sharded.json)."
        )
    fmt = export_format(args)
    for dest, formats in F.FORMAT_FLAGS:
        flag = F.flag_name(dest)
        if getattr(args, dest) is not None and fmt not in formats:
            raise ValueError(
                f"{flag} applies to --format {' and '.join(formats)} only. Received: {flag} "
                f"with --format {fmt}"
            )
    if args.max_patches is not None and fmt == "onnx":
        raise ValueError(
            "--max-patches applies to --format saved_model and litert only (a NaFlex ONNX graph "
            "takes any sequence length). Received: --max-patches with --format onnx"
        )
    if args.representative_samples is not None and args.representative_data is None:
        raise ValueError(
            "--representative-samples sets how many images of --representative-data calibrate "
            "the quantization; it cannot apply without --representative-data. Received: "
            f"--representative-samples {args.representative_samples} and no --representative-data"
        )
    # The flags are checked above, before the export modules load a framework.
    from keras_vit import export
    from keras_vit.export.litert import REPRESENTATIVE_SAMPLES

    if fmt == "saved_model":
        class_names = (
            None if args.class_names is None else export.read_class_names(args.class_names)
        )
        export.export_saved_model(
            args.model,
            args.out,
            version=args.version,
            overwrite=args.overwrite,
            class_names=class_names,
            top_k=args.top_k,
            max_patches=args.max_patches,
            verbose=True,
            precision=args.precision,
        )
    elif fmt == "onnx":
        require("tf2onnx", "onnx")
        if args.representative_data is not None and args.precision != "int8":
            raise ValueError(
                "--representative-data calibrates --precision int8 (static quantization) of an "
                f"ONNX export. Received: --representative-data with --precision {args.precision}"
            )
        export.export_onnx(
            args.model,
            args.out,
            overwrite=args.overwrite,
            verbose=True,
            precision=args.precision,
            representative_data=args.representative_data,
            representative_samples=args.representative_samples,
        )
    else:
        quantize = None if args.quantize in (None, "none") else args.quantize
        if quantize == "int8" and args.representative_data is None:
            raise ValueError(
                "--quantize int8 calibrates activation ranges on representative images: pass "
                "--representative-data digits (for a digits model), folder:PATH, tfds:NAME or "
                "a .npy/.npz file of images. Received: no --representative-data"
            )
        export.export_litert(
            args.model,
            args.out,
            quantize=quantize,
            representative_data=args.representative_data,
            representative_samples=args.representative_samples or REPRESENTATIVE_SAMPLES,
            overwrite=args.overwrite,
            max_patches=args.max_patches,
            verbose=True,
        )
    return 0


def run_inspect(args):
    from keras_vit import inspection
    from keras_vit.preprocessing import load_image
    from keras_vit.saving import check_writable

    if os.path.isdir(args.image):
        raise IsADirectoryError(f"--image {args.image!r} is a folder; expected an image file.")
    if not os.path.isfile(args.image):
        raise FileNotFoundError(f"Image file not found: {args.image!r} (--image).")
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        raise NotADirectoryError(f"--out {args.out!r} is a file; expected a folder.")
    check_writable(args.out, "--out folder")
    existing = [
        name
        for name in inspection.FIGURE_NAMES
        if os.path.lexists(os.path.join(args.out, f"{name}.png"))
    ]
    if existing and not args.overwrite:
        raise FileExistsError(
            f"--out {args.out!r} already holds {', '.join(n + '.png' for n in existing)}. Pass "
            "--overwrite to replace them, or choose another --out."
        )
    model = load_model(args.model)
    _, height, width, channels = inspection.model_input_shape(model)
    # The model's own input spec (a DeiT or DINOv2 import: its mean, std, crop).
    images, display = load_image(args.image, (height, width), channels, model=model)
    paths = inspection.save_inspection_figures(
        model,
        images,
        args.out,
        display_images=[display],
        head_fusion=args.head_fusion,
        discard_ratio=args.discard_ratio,
        num_filters=args.num_filters,
    )
    for path in paths.values():
        print(path)
    return 0
