"""`--init`: the checkpoint a fine-tuning run starts from, in any format keras_vit reads.

- a converted or trained `.keras` model (`keras_vit.load_model`, Keras' `safe_mode` on), or a
  sharded run's `model.sharded` folder (read onto the run's own layouts);
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

from keras_vit.distribution.checkpoint_files import MANIFEST as SHARDED_MANIFEST
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
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, SHARDED_MANIFEST)):
        kind = "keras"  # a sharded run's model.sharded: keras_vit.load_model reads it
    elif os.path.isdir(path):
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


def timm_checkpoint_sizes(path, name):
    """The sizes a timm state dict's shapes show: `num_layers` (its `blocks.N`), `hidden_dim`
    and, for a GELU MLP, `mlp_dim` (its first block's `mlp.fc1`), where the file says them.

    timm's own loader takes the sizes from the name (`create_model(name, depth=2)` for a file of
    another depth); a fine-tuning run takes them from the checkpoint, which defines the
    architecture. The number of heads is not in the shapes (the name's is kept unless
    `--num-heads` says it).
    """
    import re

    from keras_vit.weights.timm.names import parse_timm_name

    shapes = _state_dict_shapes(path)
    sizes = {}
    blocks = {int(m.group(1)) for key in shapes for m in [re.match(r"blocks\.(\d+)\.", key)] if m}
    if blocks:
        sizes["num_layers"] = max(blocks) + 1
    for key in ("blocks.0.norm1.weight", "cls_token", "pos_embed", "norm.weight"):
        if key in shapes and shapes[key]:
            sizes["hidden_dim"] = int(shapes[key][-1])
            break
    fc1 = shapes.get("blocks.0.mlp.fc1.weight")
    if fc1 and parse_timm_name(name).arguments.get("mlp") != "swiglu":
        sizes["mlp_dim"] = int(fc1[0])
    return sizes


def _state_dict_shapes(path):
    """`{key: shape}` of a timm checkpoint file (a safetensors header is read, not its data)."""
    if str(path).lower().endswith(".safetensors"):
        from safetensors import safe_open

        try:
            with safe_open(path, framework="numpy") as f:
                return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118
        except Exception:  # noqa: BLE001  (an unreadable file: the loader names the problem)
            return {}
    from keras_vit.weights.state_dict import read_state_dict

    try:
        return {key: tuple(value.shape) for key, value in read_state_dict(path).items()}
    except (ValueError, OSError):
        return {}


def _contradiction(key, given, found, init):
    flag = flag_name(key)
    return ValueError(
        f"{flag} {given} contradicts the --init checkpoint {init!r}, whose {key} is {found}: a "
        "checkpoint defines the architecture of a fine-tuning run. Drop "
        f"{flag} (in a config: model_overrides[{key!r}]), or give another --init."
    )


def _timm_overrides(name, path, explicit, init):
    """The builder overrides of a timm checkpoint: the sizes its shapes show where they differ
    from the name's, and the explicit ones (each checked against the shapes first)."""
    from keras_vit.weights.timm.reader import timm_config

    found = timm_checkpoint_sizes(path, name)
    for key, value in explicit.items():
        if key in found and found[key] != value:
            raise _contradiction(key, value, found[key], init)
    named = timm_config(name).to_kwargs("size")
    overrides = {k: v for k, v in found.items() if named.get(k) != v}
    return {**overrides, **explicit}


def _load_timm(name, path, size, explicit, init, pretrained=False):
    from keras_vit.weights.timm.reader import from_timm, timm_config

    overrides = _timm_overrides(name, path, explicit, init)
    try:
        return from_timm(name, path, image_size=size, **overrides)
    except ValueError as error:
        flags = " ".join(f"{flag_name(k)} {v}" for k, v in explicit.items())
        cause = (
            f"with {flags} (given; drop them to take the checkpoint's architecture)"
            if explicit
            else "with the sizes its shapes show"
            + (f" ({', '.join(f'{k}={v}' for k, v in overrides.items())})" if overrides else "")
        )
        what = f"The timm checkpoint {path!r}" + (f" of {init!r}" if pretrained else "")
        flag = "" if pretrained else f" ({flag_name('timm_name')})"
        heads = ""
        if "hidden_dim" in overrides and "num_heads" not in explicit:
            # The shapes show the width but not how it splits into heads (the name's is kept).
            named = timm_config(name).num_heads
            heads = (
                f" The number of heads is not in a checkpoint's shapes: the name's, {named}, "
                f"was kept for the file's width {overrides['hidden_dim']}; pass "
                f"{flag_name('num_heads')} with the file's head count."
            )
        raise ValueError(
            f"{what} does not fit the timm model {name!r}{flag} {cause}: {error}{heads}"
        ) from None


def load_init_model(config):
    """The keras_vit model an `--init` checkpoint holds (`config["init"]`, `["timm_name"]`).

    The checkpoint defines the architecture: timm and Hugging Face checkpoints come at
    `config["image_size"]` (unless NaFlex) with their own head or none; a timm file's sizes are
    read from its shapes (its depth, width and MLP width, as the file has them);
    `config["model_overrides"]` only state sizes, and one that contradicts the checkpoint is
    refused naming the flag and the checkpoint's value (`check_init_sizes` compares the loaded
    model).

    Returns:
        `(model, format)`.

    Raises:
        ValueError: the checkpoint does not fit the named architecture (every missing,
            unexpected or mis-shaped array listed, with the name and the file), or a size flag
            contradicts it.
    """
    path, name = config["init"], config.get("timm_name")
    kind = init_format(path, name)
    if kind == "keras":
        from keras_vit import saving

        return saving.load_model(path), kind
    explicit = dict(config.get("model_overrides") or {})
    named = init_name_kind(path)
    if named == "timm":  # the name's weights from the Hub
        from keras_vit.weights.timm.hub_checkpoint import hub_checkpoint

        name, checkpoint = hub_checkpoint(path, None, True)
        size = None if _timm_is_naflex(name) else config["image_size"]
        return _load_timm(name, checkpoint, size, explicit, path, pretrained=True), kind
    if named == "huggingface":
        from keras_vit.weights.hub import download_snapshot, split_repo

        repo_id, revision = split_repo(path)
        path = download_snapshot(repo_id, revision=revision)
    if kind == "timm":
        size = None if _timm_is_naflex(name) else config["image_size"]
        return _load_timm(name, path, size, explicit, config["init"]), kind
    from keras_vit.weights.huggingface.common import read_config
    from keras_vit.weights.huggingface.reader import from_huggingface

    naflex = read_config(path).get("model_type") in HUGGINGFACE_NAFLEX
    size = None if naflex else config["image_size"]
    return from_huggingface(path, image_size=size), kind


def check_init_sizes(source, config, check_model=True):
    """Refuses `model_overrides` (`--num-layers`, `--hidden-dim`, ...) and, with
    `check_model`, a `model` (`--model`) that contradict the `--init` checkpoint's
    architecture, naming the flag and the checkpoint's value: a run never records one
    architecture and trains another."""
    from keras_vit.models.config import ViTConfig

    arch = ViTConfig.from_model(source)
    channels = config.get("num_channels")
    if channels is not None and channels != arch.num_channels:  # the data would not fit it
        raise ValueError(
            f"num_channels ({flag_name('num_channels')}) {channels} contradicts the --init "
            f"checkpoint {config['init']!r}, which takes {arch.num_channels}-channel images: "
            f"pass {flag_name('num_channels')} {arch.num_channels}."
        )
    theirs = arch.to_kwargs("size")
    explicit = dict(config.get("model_overrides") or {})
    for key, value in explicit.items():
        if key in theirs and theirs[key] != value:
            raise _contradiction(key, value, theirs[key], config["init"])
    if not check_model or config.get("model") is None:
        return
    try:
        ours = ViTConfig.from_variant(config["model"], **explicit).to_kwargs("size")
    except (ValueError, TypeError, KeyError):
        ours = None
    if ours == theirs:
        return
    sizes = ", ".join(f"{k}={v}" for k, v in theirs.items())
    raise ValueError(
        f"--model {config['model']} contradicts --init {config['init']!r}, a model with {sizes}: "
        "fine-tuning keeps the --init model's architecture. Drop --model (the run then records "
        f"the --init model's sizes){'' if ours is None else ' or give an --init of that variant'}."
    )
