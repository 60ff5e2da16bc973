"""Tests for keras_vit/weights/timm/reader.py: timm checkpoints into keras_vit models, against timm.

The reference is timm itself (a `test` dependency, imported through
`tests.weights.references.import_timm`, torch first): one tiny model per family
(`tests.weights.timm_cases`), every parameter perturbed, run by PyTorch in this process. Each
test compares our model with timm's own forward pass on the same images and state dict.
"""

import logging
import os
import types

import numpy as np
import pytest

from keras_vit import export_timm, feature_extractor, from_timm
from keras_vit.layers.position_embedding import resample_position_embedding
from keras_vit.models.variants import parse_variant
from keras_vit.weights import registry as R
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import (
    CASES,
    DYNAMIC_RTOL,
    assert_close,
    assert_intermediates_match,
    from_timm_kwargs,
    perturb,
    random_images,
    timm_create_kwargs,
    timm_model,
    timm_reference,
    timm_run,
)

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()




def _run(model, images):
    """Our model's outputs (eager call: cheaper than compiling `predict` for one batch)."""
    outputs = model(images, training=False)
    if isinstance(outputs, (list, tuple)):
        return [to_numpy(o) for o in outputs]
    return to_numpy(outputs)




def _state(model):
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Per case: timm's perturbed model, its state dict as .safetensors, images, timm's output."""
    folder = tmp_path_factory.mktemp("timm")
    found = {}
    for case in CASES:
        model = perturb(torch, timm_model(timm, case), seed=len(case))
        images = random_images(from_timm_kwargs(case)["image_size"])
        found[case] = timm_reference(torch, model, images, folder / f"{case}.safetensors")
    return found


@pytest.fixture(scope="module")
def models(references):
    """Every case loaded from its .safetensors file by `from_timm` (built once per module)."""
    return {case: from_timm(CASES[case][0], ref["path"], **from_timm_kwargs(case))
            for case, ref in references.items()}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_matches_timm(case, references, models):
    ref = references[case]
    assert_close(_run(models[case], ref["images"]), ref["expected"])


def test_pth_and_dict_checkpoints(references, tmp_path):
    ref = references["vit_gap"]
    tensors = ref["model"].state_dict()
    torch.save({"state_dict": tensors, "epoch": 3}, tmp_path / "ckpt.pth")
    for source in (str(tmp_path / "ckpt.pth"), dict(tensors)):
        model = from_timm(CASES["vit_gap"][0], source, **from_timm_kwargs("vit_gap"))
        assert_close(_run(model, ref["images"]), ref["expected"])


@pytest.mark.parametrize("case", ["vit", "dinov2_registers", "beit", "relpos"])
def test_other_image_size_resamples_like_timm(case, references):
    """timm at another img_size, loading the state dict through its checkpoint_filter_fn.

    `beit`: the relative position tables resized (timm's resize_rel_pos_bias_table);
    `relpos`: the same MLP weights, the biases of the new grid's offsets.
    """
    ref = references[case]
    size = 3 * from_timm_kwargs(case)["image_size"] // 2  # 2x2 grid -> 3x3
    bigger = perturb(torch, timm_model(timm, case, img_size=size), seed=99)
    modules = {"beit": timm.models.beit, "relpos": timm.models.vision_transformer_relpos}
    module = modules.get(case, timm.models.vision_transformer)
    filter_fn = module.checkpoint_filter_fn
    bigger.load_state_dict(filter_fn(ref["model"].state_dict(), bigger))
    kwargs = {**from_timm_kwargs(case), "image_size": size}
    model = from_timm(CASES[case][0], ref["state"], **kwargs)
    images = random_images(size, seed=1)
    assert_close(_run(model, images), timm_run(torch, bigger, images))
    if case == "vit":  # the class row kept, the grid resampled (our NumPy bicubic)
        posemb = to_numpy(model.get_layer("patch_encoder").position_embeddings)
        expected = resample_position_embedding(
            ref["state"]["pos_embed"], (3, 3), 1, interpolation="bicubic", antialias=True
        )
        np.testing.assert_allclose(posemb, expected, rtol=1e-6, atol=1e-7)


def test_flexivit_resamples_bilinearly_like_timms_loader(references):
    """timm's FlexiViT loader resizes pos_embed bilinearly without antialiasing (its 'flexi'
    checkpoint filter), not bicubic as its other ViTs: timm's own pretrained loader at 48 px."""
    ref = references["flexivit"]
    name = CASES["flexivit"][0]
    overlay = dict(file=str(ref["path"]), num_classes=3, custom_load=False)
    kwargs = {**timm_create_kwargs("flexivit"), "img_size": 48}
    bigger = timm.create_model(name.partition(".")[0], pretrained=True,
                               pretrained_cfg_overlay=overlay, **kwargs).eval()  # fmt: skip
    model = from_timm(name, ref["path"], **{**from_timm_kwargs("flexivit"), "image_size": 48})
    images = random_images(48, seed=1)
    assert_close(_run(model, images), timm_run(torch, bigger, images))


def test_new_class_count_gives_zero_head_and_keeps_features(references, caplog):
    ref = references["vit"]
    name, kwargs = CASES["vit"][0], from_timm_kwargs("vit")
    with caplog.at_level(logging.INFO, logger="keras_vit.weights.timm.reader"):
        model = from_timm(name, ref["path"], **{**kwargs, "num_classes": 7})
    assert "dropped the checkpoint's head.weight (3, 32)" in caplog.text
    head = model.get_layer("head")
    assert head.units == 7 and not np.any(to_numpy(head.kernel))
    features = from_timm(name, ref["path"], **kwargs, include_top=False)
    timm_features = ref["model"].forward_head(
        ref["model"].forward_features(torch.from_numpy(ref["images"]).permute(0, 3, 1, 2)),
        pre_logits=True,
    )
    assert_close(_run(features, ref["images"]), timm_features.detach().numpy())


def test_backbone_checkpoint_with_a_new_head(references, models):
    model = from_timm(CASES["dinov2"][0], references["dinov2"]["path"],
                      **{**from_timm_kwargs("dinov2"), "num_classes": 4})  # fmt: skip
    assert model.output_shape == (None, 4)
    assert not np.any(to_numpy(model.get_layer("head").kernel))
    assert models["dinov2"].output_shape == (None, 32)  # no head in the checkpoint: features


def test_saved_and_reloaded(references, models, tmp_path):
    import keras_vit

    path = str(tmp_path / "siglip.keras")
    models["siglip"].save(path)
    ref = references["siglip"]
    assert_close(_run(keras_vit.load_model(path), ref["images"]), ref["expected"])


@pytest.mark.parametrize("case", ["vit", "dinov2_registers", "vit_18x2"])
def test_dynamic_image_size_matches_timm_dynamic_img_size(case, references):
    """timm's dynamic_img_size=True at two sizes and its intermediates at a third.

    `vit`: class token, position embedding on it too; `dinov2_registers`: class and 4 register
    tokens, position embedding on the patches only (then one fit step and predict at two sizes).
    """
    ref = references[case]
    patch = 14 if "dinov2" in case else 16
    reference = timm_model(timm, case, dynamic_img_size=True)
    reference.load_state_dict(ref["model"].state_dict())
    model = from_timm(CASES[case][0], ref["path"], dynamic_image_size=True,
                      **from_timm_kwargs(case))  # fmt: skip
    assert model.input_shape == (None, None, None, 3)
    for grid in ((3, 4), (2, 2)):
        images = random_images((grid[0] * patch, grid[1] * patch), seed=2)
        assert_close(_run(model, images), timm_run(torch, reference, images), DYNAMIC_RTOL)
    # Intermediate features of a dynamic model at a non-square size.
    images = random_images((3 * patch, 2 * patch), seed=3)
    assert_intermediates_match(torch, model, reference, images, (2, 3, 2, 32))
    if case == "dinov2_registers":
        model.compile(optimizer="sgd", loss="mse")
        targets = np.zeros((2, 32), "float32")
        model.fit(random_images((56, 42), seed=4), targets, epochs=1, verbose=0)
        for size in ((56, 42), (28, 70)):
            assert model.predict(random_images(size), verbose=0).shape == (2, 32)


@pytest.mark.parametrize(
    "case, indices",
    [("vit", [0, -1]), ("vit_registers", [1]), ("hybrid", 1), ("beit", [0, 1]), ("srelpos", 2)],
)
def test_feature_extractor_matches_forward_intermediates(case, indices, references, models):
    ref = references[case]
    reference = ref["model"]
    theirs = timm_run(torch, reference, ref["images"], reference.forward_intermediates,
                       indices=indices, norm=False, output_fmt="NCHW", intermediates_only=True)
    ours = _run(feature_extractor(models[case], indices), ref["images"])
    ours = ours if isinstance(ours, list) else [ours]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        assert_close(a, b)


def test_one_error_lists_every_problem_and_the_model_stays(references, models):
    name, state = CASES["vit"][0], references["vit"]["state"]
    model = models["vit"]
    before = [to_numpy(w).copy() for w in model.weights]
    bad = dict(state)
    del bad["blocks.1.norm2.bias"]  # missing
    bad["blocks.0.mlp.fc1.weight"] = bad["blocks.0.mlp.fc1.weight"][:, :16]  # mis-shaped
    bad["blocks.0.attn.q_norm.weight"] = np.ones(16, "float32")  # unexpected
    with pytest.raises(ValueError) as info:
        T.load_timm_weights(model, name, bad)
    message = str(info.value)
    assert "3 problem(s)" in message
    assert "missing    blocks.1.norm2.bias: expected (32,), not in the checkpoint" in message
    assert "unexpected blocks.0.attn.q_norm.weight: found (16,)" in message
    assert "shape      blocks.0.mlp.fc1.weight: expected (128, 32), found (128, 16)" in message
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, to_numpy(new))
    with pytest.raises(ValueError, match="3 problem"):
        from_timm(name, bad, **from_timm_kwargs("vit"))


def test_without_checkpoint_is_the_architecture_at_random():
    tiny = dict(num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64)
    stem = dict(resnet_units=(1,), resnet_width=8, resnet_groups=4)
    model = from_timm("vit_small_r26_s32_384", **tiny, **stem)
    assert model.input_shape == (None, 384, 384, 3) and model.output_shape == (None, 1000)
    assert model.get_layer("conv_root").epsilon_mode == "variance"
    assert model.get_layer("gn_root").epsilon == 1e-5
    dinov2 = from_timm("timm/vit_small_patch14_dinov2.lvd142m", **tiny)  # no head by default
    assert dinov2.output_shape == (None, 32) and dinov2.input_shape[1:3] == (518, 518)


def test_names_and_tags():
    spec = N.parse_timm_name("hf-hub:timm/deit_base_patch16_384.fb_in1k")
    assert (spec.name, spec.tag, spec.family.name, spec.image_size) == (
        "deit_base_patch16_384", "fb_in1k", "deit", 384
    )  # fmt: skip
    # timm's patch-14 convolution on 384 px sees 27 x 27 patches: 378 px.
    assert N.parse_timm_name("vit_so400m_patch14_siglip_384.webli").image_size == 378
    miil = N.parse_timm_name("vit_base_patch16_224_miil")
    assert not miil.qkv_bias and miil.num_classes == 11221
    with pytest.raises(ValueError, match=r"(?s)Unknown timm model name 'resnet50'.*vit: e\.g\."):
        N.parse_timm_name("resnet50.a1_in1k")
    giant = T.timm_config("vit_giant_patch14_dinov2.lvd142m", num_layers=1)
    sizes = (giant.hidden_dim, giant.num_heads, giant.mlp, giant.mlp_dim)
    assert sizes == (1536, 24, "swiglu", 4096)  # DINOv2 giant: SwiGLUPacked


def test_every_family_has_a_case():
    """Every core ViT family (`keras_vit.families.vit`) has a case here; the other registered
    families' are under tests/families/ (each folder must hold tests; BEiT-3's timm cases share
    test_timm_evafam.py's fixtures with LingBot and Sapiens2)."""
    tested = {N.parse_timm_name(name).family.name for name, _, _ in CASES.values()}
    others = {
        spec[0] for record in R.registered() if record.name != "vit" for spec in record.timm_specs
    }
    assert tested - others == {spec[0] for spec in R.family("vit").timm_specs}
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for record in R.registered():
        folder = os.path.join(here, "families", record.name)
        assert any(f.startswith("test_") for f in os.listdir(folder)), record.name


def _activation(block):
    act = type(block.mlp.act).__name__
    if act == "SiLU":  # SwiGLUPacked (DINOv2 giant)
        return "silu", False
    if act == "QuickGELU":
        return "quick_gelu", False
    assert act in ("GELU", "GELUTanh"), act
    tanh = act == "GELUTanh" or getattr(block.mlp.act, "approximate", "none") == "tanh"
    return "gelu", tanh


def test_every_timm_name_we_parse_is_timms_architecture():
    """Our table against every timm ViT name it reads (built on the meta device, one block)."""
    identity = torch.nn.Identity
    pools = {"token": "token", "avg": "gap", "map": "map"}
    checked = 0
    names = timm.list_models("vit_*") + timm.list_models("deit*") + timm.list_models("eva_large*")
    for name in names:
        try:
            spec = N.parse_timm_name(name)
        except ValueError:
            continue
        if spec.family.name == "relpos":  # VisionTransformerRelPos: its own test below
            continue
        if spec.extras.get("layout") == "eva":
            continue  # timm's Eva models: tests/families/eva/test_timm_eva.py
        if spec.arguments.get("block_kind") == "parallel_scaling":
            continue  # (Diff)ParallelScalingBlock: tests/families/parallel/test_timm_parallel.py
        if spec.family.name in ("resnet_d", "mci"):
            continue  # BatchNorm stems: tests/families/stems/test_timm_stems.py
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        block = model.blocks[0]
        num_parallel = len(block.attns) if hasattr(block, "attns") else 1
        if num_parallel > 1:  # ParallelThingsBlock: its first branch
            first, ffn = block.attns[0], block.ffns[0]
            block = types.SimpleNamespace(attn=first.attn, ls1=first.ls, norm1=first.norm,
                                          mlp=ffn.mlp)  # fmt: skip
        args = {**parse_variant(spec.arguments["variant"]), **spec.arguments}
        got = dict(
            hidden_dim=model.embed_dim,
            num_heads=block.attn.num_heads,
            mlp_dim=block.mlp.fc2.in_features,  # SwiGLUPacked: half of fc1
            qkv_bias=block.attn.qkv.bias is not None,
            num_classes=model.num_classes,
            class_token=model.cls_token is not None,
            num_register_tokens=model.num_reg_tokens,
            prefix_position_embedding=not model.no_embed_class,
            image_size=[s - s % p for s, p in zip(model.patch_embed.img_size,
                                                  model.patch_embed.patch_size, strict=True)],
            pooling=pools[model.global_pool],
            fc_norm=not isinstance(model.fc_norm, identity),
            pre_norm=not isinstance(model.norm_pre, identity),
            distillation_token=getattr(model, "dist_token", None) is not None,
            layer_scale=hasattr(block, "ls1") and not isinstance(block.ls1, identity),
            block_kind="post" if type(block).__name__ == "ResPostBlock"
            else "parallel" if num_parallel > 1 else "pre",
            qk_norm=not isinstance(block.attn.q_norm, identity),
            layer_norm_epsilon=block.norm1.eps,
            activation=_activation(block),
            num_parallel=num_parallel,
        )
        ours = dict(
            hidden_dim=args["hidden_dim"],
            num_heads=args["num_heads"],
            mlp_dim=T.timm_config(spec, num_layers=1).mlp_dim,  # timm's ratio where it has one
            qkv_bias=spec.qkv_bias,
            num_classes=spec.num_classes,
            class_token=args.get("class_token", True),
            num_register_tokens=args.get("num_register_tokens", 0),
            prefix_position_embedding=args.get("prefix_position_embedding", True),
            image_size=[spec.image_size] * 2,
            pooling=args.get("pooling", "token"),
            fc_norm=args.get("fc_norm", False),
            pre_norm=args.get("pre_norm", False),
            distillation_token=args.get("distillation_token", False),
            layer_scale=args.get("layer_scale_init_value") is not None,
            block_kind=args.get("block_kind", "pre"),
            qk_norm=args.get("qk_norm", False),
            layer_norm_epsilon=args.get("layer_norm_epsilon", 1e-6),
            activation=("silu", False) if args.get("mlp") == "swiglu"
            else (args.get("activation", "gelu"), args.get("approximate_gelu", True)),
            num_parallel=args.get("num_parallel", 1),
        )
        differ = {k: (ours[k], got[k]) for k in got if ours[k] != got[k]}
        assert not differ, f"{name}: (ours, timm's) {differ}"
        # Our weight-name table is exactly timm's state dict, at the real widths.
        config = T.timm_config(spec, num_layers=1)
        table = T.timm_name_table(config, qkv_bias=spec.qkv_bias, patch_bias=spec.patch_bias)
        state = set(model.state_dict())
        assert set(table) == state, f"{name}: {sorted(set(table) ^ state)}"
        checked += 1
    assert checked >= 147  # timm 1.0.31: 145 of its 230 vit_* and deit* names, EVA-01's 2


def test_beit_refuses_dynamic_image_size_and_exports():
    with pytest.raises(ValueError, match="relative_position_bias .* fixed image size"):
        from_timm("beit_base_patch16_224", dynamic_image_size=True, num_layers=1)
    beit3 = from_timm("beit3_base_patch16_224", num_layers=1, hidden_dim=32, num_heads=2,
                      image_size=32)  # fmt: skip
    with pytest.raises(ValueError, match="export_timm cannot write mlp_inner_norm=True"):
        export_timm(beit3, "unused.safetensors")


def test_every_beit_name_is_timms_architecture():
    """Our BEiT table against every timm beit* name (meta device, one block): the numbers and
    the weight names, at the real widths."""
    checked = 0
    for name in timm.list_models("beit*"):
        if name.startswith("beit3"):
            continue
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        block = model.blocks[0]
        got = (model.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features,
               model.num_classes, list(model.patch_embed.img_size), block.init_values,
               model.pos_embed is None, block.attn.window_size is not None,
               model.rel_pos_bias is None, model.global_pool, block.norm1.eps)  # fmt: skip
        ours = (config.hidden_dim, config.num_heads, config.mlp_dim, spec.num_classes,
                list(config.image_size), config.layer_scale_init_value,
                config.position_embedding is None, config.relative_position_bias == "block",
                True, "avg" if config.pooling == "gap" else config.pooling,
                config.layer_norm_epsilon)  # fmt: skip
        assert got == ours, f"{name}: timm's {got}, ours {ours}"
        table = T.timm_name_table(config)
        state = set(model.state_dict())
        assert set(table) == state, f"{name}: {sorted(set(table) ^ state)}"
        checked += 1
    assert checked == 7  # timm 1.0.31: beit_* (5) and beitv2_* (2); beit3_* refused


def test_every_relpos_name_is_timms_architecture():
    """Our table against every timm vit_relpos_* / vit_srelpos_* name (meta device, one block)."""
    checked = 0
    for name in timm.list_models("vit_*relpos_*"):
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        block = model.blocks[0]
        rel_pos = block.attn.rel_pos or model.shared_rel_pos
        got = (model.embed_dim, block.attn.num_heads, block.mlp.fc1.out_features,
               block.attn.qkv.bias is not None, model.cls_token is not None, model.global_pool,
               not isinstance(model.fc_norm, torch.nn.Identity), rel_pos.mlp.fc1.out_features,
               model.shared_rel_pos is not None, rel_pos.mode,
               block.ls1.gamma.shape if hasattr(block, "ls1") else None,
               "post" if type(block).__name__ == "ResPostRelPosBlock" else "pre",
               list(model.patch_embed.img_size), model.num_classes, block.norm1.eps)  # fmt: skip
        ours = (config.hidden_dim, config.num_heads, config.mlp_dim, spec.qkv_bias,
                config.class_token, {"gap": "avg"}.get(config.pooling, config.pooling),
                config.fc_norm, config.relative_position_mlp_dim,
                config.relative_position_bias == "mlp_shared", "cr",
                (config.hidden_dim,) if config.layer_scale_init_value is not None else None,
                config.block_kind,
                list(config.image_size), spec.num_classes, config.layer_norm_epsilon)  # fmt: skip
        assert got == ours, f"{name}: timm's {got}, ours {ours}"
        table = T.timm_name_table(config, qkv_bias=spec.qkv_bias, patch_bias=spec.patch_bias)
        state = set(model.state_dict())
        assert set(table) == state, f"{name}: {sorted(set(table) ^ state)}"
        checked += 1
    assert checked == 13  # timm 1.0.31: 13 names, the 4 post-norm *_rpn_* included


def test_supported_count_over_all_timm_names():
    """No timm name outside keras_vit's table of timm's names is read, and the registered
    families read at least the 309 names of timm 1.0.31 they read when this was written (a
    regression shows here)."""
    from keras_vit.weights.timm.pretrained import known_architectures

    reads = set()
    for name in timm.list_models():
        try:
            N.parse_timm_name(name)
        except ValueError:
            continue
        reads.add(name)
    assert reads <= known_architectures()
    assert reads == {name for name in known_architectures() if T.reads_timm_name(name)}
    assert len(reads) >= 309


def test_every_vit_module_name_is_in_the_table_and_read_or_refused_saying_why():
    """keras_vit's table of timm's names holds every name of timm's ViT modules and VLM vision
    towers; each is read, or refused saying that no registered family reads it."""
    from keras_vit.weights.timm.pretrained import known_architectures, timm_modules

    modules = timm_modules()
    in_modules = {n for m in modules["vit"] + modules["towers"] for n in timm.list_models(module=m)}
    assert in_modules <= known_architectures()
    for name in sorted(in_modules):
        if T.reads_timm_name(name):
            continue
        with pytest.raises(ValueError, match="no registered model family reads it"):
            N.parse_timm_name(name)
