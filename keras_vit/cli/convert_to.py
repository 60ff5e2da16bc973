"""`keras-vit convert MODEL.keras OUTPUT --to timm|huggingface`: a keras_vit model for PyTorch.

The way back of `convert --from`: the `.keras` model is written as a timm state dict
(`keras_vit.export_timm`; the timm model to create it in is printed) or a transformers
`save_pretrained` folder (`keras_vit.export_huggingface`). A masked autoencoder
(`keras-vit pretrain-mae`'s model) becomes a `ViTMAEForPreTraining` folder (encoder and
decoder), or for timm its encoder alone, as timm's `*.mae` checkpoints are (said when written).
"""

TARGETS = ("timm", "huggingface")
# convert's flags that shape a model read from a checkpoint: they do not apply with --to.
READING_FLAGS = {
    "model": "--model",
    "image_size": "--image-size",
    "num_classes": "--num-classes",
    "representation_size": "--representation-size",
    "pooling": "--pooling",
    "no_top": "--no-top",
    "source_grid": "--source-grid",
    "no_strict": "--no-strict",
    "force_download": "--force-download",
}


def add_target_flag(parser):
    """Adds `--to` to the `convert` parser."""
    parser.add_argument(
        "--to",
        dest="target",
        choices=TARGETS,
        help="write the .keras model MODEL for PyTorch instead: MODEL OUTPUT, OUTPUT a timm "
        ".safetensors state dict (the timm.create_model call is printed) or a transformers "
        "save_pretrained folder",
    )


def convert_to_arguments(args):
    """`{"MODEL": ..., "OUTPUT": ...}` of `convert --to`, its flags checked (ValueError: exit 2)."""
    if getattr(args, "source", None) is not None:
        raise ValueError(
            f"convert takes --from (a checkpoint into a .keras model) or --to (a .keras model "
            f"out), not both; received --from {args.source} --to {args.target}"
        )
    for flag, name in READING_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None and value is not False:
            raise ValueError(
                f"{name} applies to --from only (reading a checkpoint); received it with "
                f"--to {args.target}"
            )
    if len(args.paths) != 2:
        raise ValueError(
            f"convert --to {args.target} expects 2 arguments, MODEL OUTPUT (a .keras model and "
            f"the {'.safetensors file' if args.target == 'timm' else 'folder'} to write); "
            f"received {len(args.paths)}: {' '.join(args.paths)}"
        )
    return dict(zip(("MODEL", "OUTPUT"), args.paths, strict=True))


def run_convert_to(args):
    """Writes the `.keras` model for timm or transformers and prints how to load it."""
    from keras_vit.models.mae import MaskedAutoencoder
    from keras_vit.saving import check_folder_name, check_suffix, load_model
    from keras_vit.weights.huggingface.export import export_huggingface
    from keras_vit.weights.timm.export import export_timm

    paths = convert_to_arguments(args)
    output = paths["OUTPUT"]
    if args.target == "timm":  # before reading the model: OUTPUT's name must say safetensors
        check_suffix(output, (".safetensors",), "a timm state dict (safetensors)", "OUTPUT")
    else:
        check_folder_name(output, "config.json and model.safetensors", "OUTPUT")
    model = load_model(paths["MODEL"])
    mae = isinstance(model, MaskedAutoencoder)
    if args.target == "timm":
        source = model.encoder if mae else model  # the encoder model the autoencoder holds
        exported = export_timm(source, output, overwrite=args.overwrite)
        if mae:
            print(
                f"{model.name} is a masked autoencoder: its encoder is written (timm's *.mae "
                "checkpoints are the encoder alone; timm has no MAE decoder)."
            )
        print(
            f"Wrote {output}: the state dict of timm's {exported.name} (from the keras_vit "
            f"model {source.name!r} in {paths['MODEL']}). In PyTorch:"
        )
        print(f"  model = {exported.create_model_call()}")
        print(f"  model.load_state_dict(safetensors.torch.load_file({output!r}))")
        return 0
    folder = export_huggingface(model, output, overwrite=args.overwrite)
    if mae:
        print(
            f"Wrote {folder}: config.json and model.safetensors of transformers' ViTMAE. In "
            "PyTorch:"
        )
        print(f"  model = transformers.ViTMAEForPreTraining.from_pretrained({folder!r})")
        return 0
    if model.config.include_top:  # export_huggingface read and checked the config
        load = "AutoModelForImageClassification.from_pretrained({!r})"
    else:
        load = "ViTModel.from_pretrained({!r}, add_pooling_layer=False)"
    print(f"Wrote {folder}: config.json and model.safetensors of transformers' ViT. In PyTorch:")
    print("  model = transformers." + load.format(folder))
    return 0

