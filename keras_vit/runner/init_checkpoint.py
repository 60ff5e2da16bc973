"""`--init`: the checkpoint a fine-tuning run starts from, in any format keras_vit reads.

- a converted or trained `.keras` model (`keras_vit.load_model`, Keras' `safe_mode` on);
- a Hugging Face `save_pretrained` folder (`config.json` + safetensors; `from_huggingface`);
- a timm checkpoint file (`.safetensors`, or `.bin` / `.pth` / `.pt` read with
  `torch.load(weights_only=True)`) with its timm model name (`--timm-name`; `from_timm`);
- a name (not an existing path): a timm name (`vit_small_patch14_dinov2.lvd142m`,
  `hf-hub:timm/<name>@<revision>`: `from_timm(name, pretrained=True)`) or a Hugging Face repo
  id (`google/vit-base-patch16-224`, `hf://<org>/<repo>@<revision>`: `from_huggingface`),
  downloaded through `huggingface_hub` into the standard Hugging Face cache.

`init_format` decides the format from the path (and checks the flags that go with it) before
any data is loaded; `load_init_model` reads the checkpoint into a keras_vit model, the
*source* that `keras_vit.runner.finetune.build_model` rebuilds at the run's image size with a
new head. timm and Hugging Face checkpoints are read at the run's image size by their own
loader (position embedding and relative-position tables resampled as timm / transformers do),
NaFlex ones at their own table grid (NaFlex models take any image size).
"""

import os

from keras_vit.runner.flag_names import flag_name

TIMM_EXTENSIONS = (".safetensors", ".bin", ".pth", ".pt")
FORMATS = ("keras", "huggingface", "timm")
# transformers `model_type`s keras_vit reads as NaFlex models (their table grid is kept).
HUGGINGFACE_NAFLEX = ("siglip2", "siglip2_vision_model")
_EXPECTED = (
    "a .keras model, a Hugging Face save_pretrained folder (config.json + safetensors), a "
    f"timm checkpoint file ({', '.join(TIMM_EXTENSIONS)}) with --timm-name NAME, a timm model "
    "name (e.g. vit_small_patch14_dinov2.lvd142m) or a Hugging Face repo id (org/repo)"
)


def init_format(path, timm_name=None):
    """The format of an `--init` checkpoint: `"keras"`, `"huggingface"` or `"timm"`.

    Args:
        path: str. The `--init` path.
        timm_name: optional str. The timm model name (`--timm-name`), for a timm file only.

    Returns:
        One of `FORMATS`.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: a path of no known format, a timm file without its name, or a name with
            another format; the message names what was expected and what was received.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> open(os.path.join(folder, "config.json"), "w").close()
    >>> init_format(folder)
    'huggingface'
    """
    if timm_name is not None and (not isinstance(timm_name, str) or not timm_name.strip()):
        raise ValueError(
            f"timm_name ({flag_name('timm_name')}) must be a timm model name, e.g. "
            f"'vit_base_patch16_224.augreg_in21k'. Received: {timm_name!r}"
        )
    path = os.fspath(path)
    named = init_name_kind(path)
    if named is not None:
        if timm_name is not None:
            raise ValueError(
                f"{flag_name('timm_name')} names the architecture of a timm checkpoint file; "
                f"init is a name, which says it. Received: init={path!r}, timm_name={timm_name!r}"
            )
        return named
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"init ({flag_name('init')}) not found: {path!r}. Expected {_EXPECTED}."
            + _nearest_names(path)
        )
    lower = path.lower()
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ValueError(
                f"init ({flag_name('init')}) must be {_EXPECTED}. Received: a folder without "
                f"config.json: {path!r}"
            )
        kind = "huggingface"
    elif lower.endswith(".keras"):
        kind = "keras"
    elif lower.endswith(TIMM_EXTENSIONS):
        kind = "timm"
    elif lower.endswith(".npz"):
        raise ValueError(
            f"An official .npz checkpoint goes to --weights (with --model). Received: init={path!r}"
        )
    else:
        raise ValueError(f"init ({flag_name('init')}) must be {_EXPECTED}. Received: {path!r}")
    if kind == "timm" and timm_name is None:
        raise ValueError(
            f"A timm checkpoint needs its timm model name: add {flag_name('timm_name')} NAME "
            f"(the timm.create_model name its state dict belongs to). Received: init={path!r}, "
            "timm_name=None"
        )
    if kind != "timm" and timm_name is not None:
        raise ValueError(
            f"{flag_name('timm_name')} names the architecture of a timm checkpoint file "
            f"({', '.join(TIMM_EXTENSIONS)}); init is a {kind} checkpoint. Received: "
            f"init={path!r}, timm_name={timm_name!r}"
        )
    return kind


def init_name_kind(path):
    """`"timm"` / `"huggingface"` for an `--init` that is a name, not a path; else None.

    A timm name is one of timm's registered architectures (with tag, `timm/` or `hf-hub:`
    prefix); a Hugging Face repo id is `org/repo` (or `hf://...`) that is not an existing path.
    """
    from keras_vit.weights.hub import is_repo_id
    from keras_vit.weights.timm.pretrained import known_architectures, split_timm_name

    if os.path.exists(path):
        return None
    if path.startswith(("hf-hub:", "hf_hub:")):
        return "timm"
    if split_timm_name(path)[0] in known_architectures() and not path.startswith("hf://"):
        return "timm"
    return "huggingface" if is_repo_id(path) else None


def _nearest_names(path):
    """ " Did you mean: ..." with the timm names nearest a mistyped one (else "")."""
    import difflib

    from keras_vit.weights.timm.pretrained import known_architectures, split_timm_name

    near = difflib.get_close_matches(
        split_timm_name(os.path.basename(path))[0], sorted(known_architectures()), n=3, cutoff=0.8
    )
    return f" Did you mean the timm name {' or '.join(near)}?" if near else ""


def _timm_is_naflex(name):
    from keras_vit.weights.timm.names import parse_timm_name

    return bool(parse_timm_name(name).arguments.get("naflex"))


def load_init_model(config):
    """The keras_vit model an `--init` checkpoint holds (`config["init"]`, `["timm_name"]`).

    timm and Hugging Face checkpoints come at `config["image_size"]` (unless NaFlex) with
    their own head or none, and with `config["model_overrides"]` as builder overrides (the
    sizes of a checkpoint of another depth or width, as timm's `create_model(name, depth=2)`).

    Returns:
        `(model, format)`.

    Raises:
        ValueError: the checkpoint does not fit the named architecture (every missing,
            unexpected or mis-shaped array listed, with the name and the file).
    """
    path, name = config["init"], config.get("timm_name")
    kind = init_format(path, name)
    if kind == "keras":
        from keras_vit import saving

        return saving.load_model(path), kind
    overrides = dict(config.get("model_overrides") or {})
    named = init_name_kind(path)
    if named == "timm":  # the name's weights from the Hub
        from keras_vit.weights.timm.reader import from_timm

        size = None if _timm_is_naflex(path) else config["image_size"]
        return from_timm(path, pretrained=True, image_size=size, **overrides), kind
    if named == "huggingface":
        from keras_vit.weights.hub import download_snapshot, split_repo

        repo_id, revision = split_repo(path)
        path = download_snapshot(repo_id, revision=revision)
    if kind == "timm":
        from keras_vit.weights.timm.reader import from_timm

        size = None if _timm_is_naflex(name) else config["image_size"]
        try:
            return from_timm(name, path, image_size=size, **overrides), kind
        except ValueError as error:
            raise ValueError(
                f"The timm checkpoint {path!r} does not fit the timm model {name!r} "
                f"({flag_name('timm_name')}): {error}"
            ) from None
    from keras_vit.weights.huggingface.common import read_config
    from keras_vit.weights.huggingface.reader import from_huggingface

    naflex = read_config(path).get("model_type") in HUGGINGFACE_NAFLEX
    size = None if naflex else config["image_size"]
    return from_huggingface(path, image_size=size, **overrides), kind
