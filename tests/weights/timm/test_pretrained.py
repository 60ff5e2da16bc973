"""keras_vit's table of timm's pretrained configs (keras_vit/weights/timm/pretrained.json),
against the installed timm, and name resolution over every name of it (no network)."""

import sys

import pytest

import keras_vit
from keras_vit.weights import hub
from keras_vit.weights.timm import hub_checkpoint as timm_hub
from keras_vit.weights.timm import pretrained as timm_pretrained
from keras_vit.weights.timm.names import match_timm_family, parse_timm_name
from keras_vit.weights.timm.pretrained import pretrained_cfg
from tests.weights.references import import_timm

FIELDS = ("hf_hub_id", "hf_hub_filename", "url", "num_classes", "fixed_input_size",
          "crop_pct", "crop_mode", "interpolation", "license")  # fmt: skip


def test_table_is_timms_pretrained_cfg_for_every_name():
    timm = import_timm()
    from timm.data import infer_imagenet_subset
    from timm.models import get_pretrained_cfg

    read = {a for a in timm.list_models() if match_timm_family(a) is not None}
    assert read == timm_pretrained.known_architectures() and len(read) == 309
    names = timm_pretrained.pretrained_names()
    assert len(names) == sum(len(timm.list_pretrained(f"{a}.*")) for a in read)
    untagged = [a for a in read if timm_pretrained.default_tag(a) is None]
    for name in names + untagged:
        theirs, ours = get_pretrained_cfg(name), pretrained_cfg(name)
        for field in FIELDS:
            assert ours[field] == (getattr(theirs, field) or None if field in FIELDS[:3]
                                   else getattr(theirs, field)), (name, field)  # fmt: skip
        assert ours["mean"] == list(theirs.mean) and ours["std"] == list(theirs.std), name
        assert ours["input_size"] == list(theirs.input_size), name
        assert ours["label_set"] == infer_imagenet_subset(theirs.to_dict()), name
    for arch in read:  # the name without a tag: timm's default tag
        assert pretrained_cfg(arch)["tag"] == (
            get_pretrained_cfg(arch).tag or None if timm.list_pretrained(f"{arch}.*") else None
        )


def test_every_name_resolves_to_timms_repo_and_file():
    import_timm()
    from timm.models import get_pretrained_cfg
    from timm.models._builder import _resolve_pretrained_source
    from timm.models._hub import _get_safe_alternatives

    resolved = refused = 0
    for name in timm_pretrained.pretrained_names():
        load_from, location = _resolve_pretrained_source(get_pretrained_cfg(name).to_dict())
        if load_from != "hf-hub":  # a URL (I-JEPA's .pth.tar): refused, naming it
            with pytest.raises(ValueError, match="not from the Hugging Face Hub"):
                timm_hub.resolve_timm_name(name)
            refused += 1
            continue
        repo_id, filename = location if isinstance(location, tuple) else (location, None)
        source = timm_hub.resolve_timm_name(name)
        assert source["repo_id"] == repo_id, name
        safe = (
            filename
            if filename and filename.endswith(".safetensors")
            else next(iter(_get_safe_alternatives(filename or "pytorch_model.bin")))
        )
        assert source["filename"] == safe and safe.endswith(".safetensors"), name
        assert (source["architecture"], source["tag"]) == tuple(name.split(".", 1))
        resolved += 1
    assert resolved > 450 and refused == 4, (resolved, refused)


def test_names_are_looked_up_not_parsed():
    # Issue 43: a mistyped name used to build a 240 px model, or a patch-7 one.
    for wrong, near in (("vit_tiny_patch16_244", "vit_tiny_patch16_224"),
                        ("vit_tiny_patch7_225", "vit_tiny_patch16_224"),
                        ("vit_small_patch14_dinov3", "vit_small_patch16_dinov3")):  # fmt: skip
        with pytest.raises(ValueError, match="Did you mean") as error:
            parse_timm_name(wrong)
        assert f"Unknown timm model name {wrong!r}" in str(error.value) and near in str(error.value)
        with pytest.raises(ValueError, match="Did you mean"):
            keras_vit.from_timm(wrong)  # one place refuses: from_timm, convert, --init
        with pytest.raises(ValueError, match="Did you mean"):
            pretrained_cfg(wrong + ".augreg_in1k")
    with pytest.raises(ValueError, match=r"no pretrained tag 'nope'.*augreg2_in21k_ft_in1k"):
        pretrained_cfg("vit_base_patch16_224.nope")
    assert pretrained_cfg("vit_base_patch16_224")["tag"] == "augreg2_in21k_ft_in1k"
    cfg = pretrained_cfg("hf-hub:timm/vit_small_patch14_dinov2.lvd142m@abc")
    assert (cfg["mean"], cfg["crop_pct"], cfg["interpolation"]) == (
        [0.485, 0.456, 0.406], 1.0, "bicubic")  # fmt: skip
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm_hub.resolve_timm_name("vit_base_patch16_gap_224")


def test_hub_names():
    assert hub.split_repo("hf://org/repo@v1") == ("org/repo", "v1")
    assert hub.split_repo("org/repo", "v2") == ("org/repo", "v2")
    with pytest.raises(ValueError, match="Two revisions"):
        hub.split_repo("org/repo@v1", "v2")
    assert hub.is_repo_id("google/vit-base-patch16-224") and hub.is_repo_id("hf://a/b@c")
    assert not hub.is_repo_id("missing_folder") and not hub.is_repo_id(".")
    assert not hub.is_repo_id("runs/model.keras") and not hub.is_repo_id("out/w.safetensors")
    assert hub.is_repo_id("timm/vit_base_patch16_224.augreg_in21k")
    source = timm_hub.resolve_timm_name("hf-hub:timm/vit_base_patch16_224.augreg_in1k@0123abc")
    assert source == dict(repo_id="timm/vit_base_patch16_224.augreg_in1k", revision="0123abc",
                          filename="model.safetensors", architecture="vit_base_patch16_224",
                          tag="augreg_in1k")  # fmt: skip
    pinned = timm_hub.resolve_timm_name("vit_base_patch16_clip_quickgelu_224.openai@v2")
    assert pinned["repo_id"] == "timm/vit_base_patch16_clip_224.openai"  # timm's hf_hub_id
    assert pinned["revision"] == "v2"


def test_missing_huggingface_hub_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import` raises ImportError
    with pytest.raises(ImportError, match=r'pip install "keras-vit\[hub\]"'):
        keras_vit.from_timm("vit_tiny_patch16_224", pretrained=True)
    with pytest.raises(ImportError, match=r'pip install "keras-vit\[hub\]"'):
        keras_vit.from_huggingface("google/vit-base-patch16-224")
    with pytest.raises(ValueError, match="not both"):
        keras_vit.from_timm("vit_tiny_patch16_224", {}, pretrained=True)


def test_force_download_is_for_names_only(tmp_path, capsys):
    from keras_vit.cli import main

    with pytest.raises(ValueError, match="force_download=True .* needs pretrained=True"):
        keras_vit.from_timm("vit_tiny_patch16_224", force_download=True)
    with pytest.raises(ValueError, match="force_download=True is for a Hub repo id"):
        keras_vit.from_huggingface(str(tmp_path), force_download=True)  # an existing folder
    npz = ["ViT-Ti_16.npz", "out.keras", "--model", "Ti/16"]
    timm_file = ["--from", "timm", "vit_tiny_patch16_224", "w.safetensors", "out.keras"]
    for args in (npz, timm_file):
        assert main(["convert", *args, "--force-download"]) == 2
        assert "--force-download downloads a name" in capsys.readouterr().err
    assert main(["convert", "m.keras", "out.safetensors", "--to", "timm", "--force-download"]) == 2
    assert "--force-download applies to --from only" in capsys.readouterr().err
