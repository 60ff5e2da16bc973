"""One tiny timm model per family `keras_vit.from_timm` reads (tests/weights/timm/test_reader.py).

`CASES` maps a case id to the timm name, the `timm.create_model` overrides of `SMALL` that make
it tiny (timm's names: `depth`, `embed_dim`, `img_size`), and the `from_timm` overrides of
`OURS` that make ours the same size. `timm_model(timm, case)` builds the timm model (timm from
`tests.weights.references.import_timm`) and `perturb` randomises every parameter, so that
biases, norms and LayerScale are not their trivial initial values.
"""

# timm's names for our tiny sizes. One image size per patch size, a 2x2 grid, and one class
# count keep the shapes shared between cases (JAX and TensorFlow compile once per shape).
SMALL = dict(depth=2, embed_dim=32, num_heads=2, img_size=32, num_classes=3)
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2, mlp_dim=128, image_size=32)

# id: (timm name, timm.create_model overrides, from_timm overrides).
CASES = {
    "vit": ("vit_base_patch16_224.augreg_in21k", {}, {}),
    "vit_miil": ("vit_base_patch16_224_miil.in21k", {}, {}),
    "vit_plus": ("vit_base_patch16_plus_240", {}, {}),
    "vit_36x1": ("vit_small_patch16_36x1_224", {}, {}),
    "vit_18x2": ("vit_small_patch16_18x2_224", {}, {}),
    "deit": ("deit_tiny_patch16_224.fb_in1k", {}, {}),
    "deit_distilled": ("deit_tiny_distilled_patch16_224.fb_in1k", {}, {}),
    "deit3": ("deit3_small_patch16_224.fb_in22k_ft_in1k", {}, {}),
    "vit_gap": ("vit_medium_patch16_gap_256", {}, {}),
    "vit_registers": ("vit_betwixt_patch16_reg4_gap_256.sbb_in12k", {}, {}),
    "vit_registers_map": ("vit_so150m_patch16_reg4_map_256", {},
                          dict(mlp_dim=82)),  # timm: int(32 * 2.572)
    "dinov2": ("vit_small_patch14_dinov2.lvd142m", dict(img_size=28, num_classes=0),
               dict(image_size=28)),
    # SwiGLUPacked: fc1 int(32 * 5.33334) = 170 = 2 x 85.
    "dinov2_giant": ("vit_giant_patch14_dinov2.lvd142m", dict(img_size=28, num_classes=0),
                     dict(image_size=28, mlp_dim=85)),
    "eva_large": ("eva_large_patch14_196.in22k_ft_in1k", dict(img_size=28), dict(image_size=28)),
    "dinov2_registers": ("vit_small_patch14_reg4_dinov2.lvd142m",
                         dict(img_size=28, num_classes=0), dict(image_size=28)),
    "clip": ("vit_base_patch16_clip_224.openai", {}, {}),
    "clip_quickgelu": ("vit_base_patch32_clip_quickgelu_224.openai", dict(img_size=64),
                       dict(image_size=64)),
    "siglip_gap": ("vit_base_patch32_siglip_gap_256.v2_webli", dict(img_size=64),
                   dict(image_size=64)),
    "siglip": ("vit_base_patch16_siglip_224.webli", {}, {}),
    "flexivit": ("flexivit_small.1200ep_in1k", {}, {}),
    "beit": ("beitv2_base_patch16_224.in1k_ft_in22k_in1k", {}, {}),
    "relpos": ("vit_relpos_medium_patch16_224.sw_in1k", {}, {}),
    "vit_rpn": ("vit_base_patch16_rpn_224.sw_in1k", {}, {}),  # residual post-norm blocks
    "relpos_rpn": ("vit_relpos_medium_patch16_rpn_224.sw_in1k", {}, {}),
    "srelpos": ("vit_srelpos_small_patch16_224.sw_in1k", {}, {}),
    "hybrid": ("vit_small_r26_s32_224.augreg_in21k_ft_in1k", dict(depth=1),
               dict(resnet_units=(1, 1), resnet_width=8, resnet_groups=4, num_layers=1)),
    "hybrid_r50": ("vit_base_r50_s16_384.orig_in21k_ft_in1k", dict(depth=1),
                   dict(resnet_units=(1, 1, 1), resnet_width=8, resnet_groups=4, num_layers=1)),
    "hybrid_root": ("vit_tiny_r_s16_p8_384.augreg_in21k_ft_in1k", dict(img_size=64, depth=1),
                    dict(image_size=64, num_layers=1)),
}  # fmt: skip


def timm_create_kwargs(case):
    """`timm.create_model` keyword arguments of a case (tiny sizes, eval-mode defaults)."""
    _, overrides, _ = CASES[case]
    return {**SMALL, **overrides}


def from_timm_kwargs(case):
    """`keras_vit.from_timm` keyword arguments of a case."""
    _, _, ours = CASES[case]
    return {**OURS, **ours}


def timm_model(timm, case, **overrides):
    """The tiny timm model of a case, in eval mode; `overrides` go to `timm.create_model`."""
    name = CASES[case][0].partition(".")[0]
    kwargs = {**timm_create_kwargs(case), **overrides}
    units = CASES[case][2].get("resnet_units")
    if units:  # timm's R26 / R50 hybrid with a ResNetV2 of one unit per stage, width 8, 4 groups
        import functools

        from timm.layers import GroupNormAct, HybridEmbed, StdConv2dSame
        from timm.models.resnetv2 import ResNetV2
        from timm.models.vision_transformer import VisionTransformer

        backbone = ResNetV2(
            layers=units,
            channels=tuple(32 * 2**s for s in range(len(units))),
            stem_chs=8,
            num_classes=0,
            global_pool="",
            preact=False,
            stem_type="same",
            conv_layer=functools.partial(StdConv2dSame, eps=1e-8),
            norm_layer=functools.partial(GroupNormAct, num_groups=4),
        )
        embed = functools.partial(HybridEmbed, backbone=backbone)
        return VisionTransformer(patch_size=1, embed_layer=embed, **kwargs).eval()
    return timm.create_model(name, pretrained=False, **kwargs).eval()


def randomize_batchnorm_statistics(torch, model, seed=0):
    """Every BatchNorm's running statistics random (means in [-0.5, 0.5), variances in
    [0.5, 1.5)), so that a loader which drops them shows (timm's ResNet-D / MobileCLIP stems)."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            noise = torch.rand(buffer.shape, generator=generator)
            if name.endswith("running_mean"):
                buffer.copy_(noise - 0.5)
            elif name.endswith("running_var"):
                buffer.copy_(noise + 0.5)
    return model


def perturb(torch, model, seed=0, scales=(".ls",)):
    """Every parameter random: norm and LayerScale weights around 1, everything else around 0.

    `scales`: substrings naming the LayerScale parameters (timm's `.ls`; transformers'
    `lambda1` / `lambda_1`: pass `("lambda",)`).
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator) * 0.2
            around_one = parameter.ndim == 1 and ("norm" in name or any(s in name for s in scales))
            parameter.copy_(noise + 1.0 if around_one else noise)
    return model


RTOL = 1e-5  # our model against timm, same weights and images


def random_images(size, seed=0):
    """Two NHWC float32 images in [-1, 1) of `size` (int or (height, width))."""
    import numpy as np

    height, width = (size, size) if isinstance(size, int) else size
    return np.random.default_rng(seed).uniform(-1, 1, (2, height, width, 3)).astype("float32")


def timm_run(torch, model, images, method=None, **kwargs):
    """timm's output on NHWC `images` (a list of feature maps comes back NHWC too)."""
    with torch.no_grad():
        out = (method or model)(torch.from_numpy(images).permute(0, 3, 1, 2), **kwargs)
    if isinstance(out, (list, tuple)):
        return [o.permute(0, 2, 3, 1).numpy() for o in out]  # NCHW -> NHWC
    return out.numpy()


def assert_close(actual, expected, rtol=RTOL):
    """Max error relative to the largest expected magnitude, at most `rtol`."""
    import numpy as np

    expected = np.asarray(expected, "float64")
    error = np.abs(np.asarray(actual, "float64") - expected).max() / np.abs(expected).max()
    assert error <= rtol, f"max relative error {error:.2e} > {rtol:.0e}"


def timm_reference(torch, model, images, path):
    """A perturbed timm model's case: its state dict (also written to `path` as .safetensors),
    the images and timm's output on them."""
    from keras_vit.weights.state_dict import write_safetensors

    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return dict(
        model=model,
        state=state,
        path=write_safetensors(state, path),
        images=images,
        expected=timm_run(torch, model, images),
    )


def tiny_timm_model(timm, name, size, small, **overrides):
    """timm's model `name` (any tag dropped) at the `small` sizes and image `size`, eval mode."""
    kwargs = {**small, "img_size": size, **overrides}
    return timm.create_model(name.partition(".")[0], pretrained=False, **kwargs).eval()


def tiny_references(torch, timm, cases, small, folder, overrides=None):
    """`timm_reference` of each case `{id: (timm name, image size)}`, perturbed (seed len(id));
    `overrides`: `{id: timm.create_model arguments}` of the cases that have their own."""
    found = {}
    for case, (name, size) in cases.items():
        model = tiny_timm_model(timm, name, size, small, **(overrides or {}).get(case, {}))
        model = perturb(torch, model, seed=len(case))
        path = folder / f"{case}.safetensors"
        found[case] = timm_reference(torch, model, random_images(size), path)
    return found


def meta_models(torch, timm, names):
    """Per name: `(name, spec, timm's model on the meta device at depth 1, our config at depth 1)`,
    after checking that our weight-name table is exactly its state dict's keys."""
    from keras_vit.weights.timm import names as N
    from keras_vit.weights.timm import reader as T

    for name in names:
        spec = N.parse_timm_name(name)
        with torch.device("meta"):
            model = timm.create_model(name, depth=1)
        config = T.timm_config(spec, num_layers=1)
        table, state = set(T.timm_name_table(config, spec=spec)), set(model.state_dict())
        assert table == state, f"{name}: {sorted(table ^ state)}"
        yield name, spec, model, config
