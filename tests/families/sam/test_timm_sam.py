"""timm's SAM image encoders (`samvit_*`) through `keras_vit.from_timm`.

Tiny perturbed timm `VisionTransformerSAM`s (windowed blocks on a grid the window does not
divide, a global block, decomposed relative positions, the position grid and the conv neck;
`samvit_base_patch16_224`'s LayerNorm neck and head; a checkpoint run at another image size)
against timm within 1e-5: the pooled output timm's `forward` gives and the neck's feature map
(`forward_features`); the strict loader's refusal; a `.keras` round trip; argument errors;
every `samvit_*` name parses to the family; by name through the loopback Hub.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.families.sam.config import SAMConfig
from keras_vit.families.sam.model import SAMImageEncoder
from keras_vit.weights.timm import names as N
from keras_vit.weights.timm import reader as T
from tests.helpers import roundtrip_model, to_numpy
from tests.weights.references import import_timm, import_torch
from tests.weights.timm_cases import assert_close, perturb, random_images, timm_run

torch = import_torch()  # before timm, whatever the backend
timm = import_timm()

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 3))
TIMM = dict(depth=2, embed_dim=32, num_heads=2, patch_size=8)
OURS = dict(num_layers=2, hidden_dim=32, num_heads=2, mlp_dim=128, patch_size=8)
# id: (timm name, timm's image size, timm arguments, our arguments, the size both run at)
CASES = {
    # a 6 x 6 grid in 4 x 4 windows (padded), block 1 global; the position grid; the neck
    "encoder_padded_windows": (
        "samvit_base_patch16", 48,
        dict(window_size=4, global_attn_indexes=[1], neck_chans=16),
        dict(window_size=4, global_attention_indexes=(1,), neck_dim=16), 48,
    ),
    # no position grid, a LayerNorm neck and a 5-class head; block 0 global
    "classifier_224": (
        "samvit_base_patch16_224", 32,
        dict(window_size=2, global_attn_indexes=[0], num_classes=5),
        dict(window_size=2, global_attention_indexes=(0,)), 32,
    ),
    # a 32 px checkpoint run at 48 px: the grid resampled, the global tables resized
    "encoder_other_size": (
        "samvit_base_patch16", 32,
        dict(window_size=3, global_attn_indexes=[0], neck_chans=16),
        dict(window_size=3, global_attention_indexes=(0,), neck_dim=16), 48,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def references():
    """Per case: timm's perturbed state dict, the images, timm's pooled output and its neck's
    map (NHWC)."""
    found = {}
    for case, (name, size, timm_args, _, run_size) in CASES.items():
        model = timm.create_model(name, pretrained=False, img_size=size, **TIMM, **timm_args)
        model = perturb(torch, model.eval(), seed=len(case))
        images = random_images(run_size, seed=len(case))
        found[case] = dict(
            state={k: v.detach().numpy().copy() for k, v in model.state_dict().items()},
            images=images,
            pooled=timm_run(torch, model, images),
            features=timm_run(torch, model, images, method=model.forward_features),
        )
    return found


def _ours(case, state, **overrides):
    name, _, _, ours, run_size = CASES[case]
    return keras_vit.from_timm(name, state, image_size=run_size, **{**OURS, **ours, **overrides})


@pytest.mark.parametrize("case", sorted(CASES))
def test_pooled_output_and_neck_map_equal_timm(references, case):
    reference = references[case]
    model = _ours(case, reference["state"])
    assert isinstance(model, SAMImageEncoder)
    # predict: one compiled graph per model (JAX's eager call compiles every op on its own)
    pooled = model.predict(reference["images"], verbose=0)
    assert pooled.shape == reference["pooled"].shape
    assert_close(pooled, reference["pooled"])
    features = model.feature_map.predict(reference["images"], verbose=0)
    expected = np.transpose(reference["features"], (0, 2, 3, 1))  # timm's NCHW map
    assert features.shape == expected.shape
    assert_close(features, expected)


def test_windowed_and_global_blocks_and_relative_positions_matter(references):
    """The case's blocks are what timm's are (windowed, global), and the relative positions
    and the neck carry weight: zeroing the tables changes the output."""
    reference = references["encoder_padded_windows"]
    model = _ours("encoder_padded_windows", reference["state"])
    assert [block.window_size for block in model.blocks] == [4, 0]
    assert [block.attention.relative_position_size for block in model.blocks] == [(4, 4), (6, 6)]
    state = {k: (0 * v if "rel_pos" in k else v) for k, v in reference["state"].items()}
    other = to_numpy(_ours("encoder_padded_windows", state)(reference["images"]))
    assert np.abs(other - reference["pooled"]).max() > 1e-3


def test_strict_loader_refuses_a_checkpoint_that_does_not_fit(references):
    state = dict(references["encoder_padded_windows"]["state"])
    model = _ours("encoder_padded_windows", None)
    before = [to_numpy(w).copy() for w in model.weights]
    broken = {k: v for k, v in state.items() if k != "blocks.1.attn.rel_pos_w"}
    broken["blocks.0.extra"] = np.zeros(3, "float32")
    from keras_vit.families.sam.timm import load_timm_sam

    with pytest.raises(ValueError, match=r"(?s)blocks\.1\.attn\.rel_pos_w.*blocks\.0\.extra"):
        load_timm_sam(model, broken)
    assert all((to_numpy(w) == b).all() for w, b in zip(model.weights, before, strict=True))
    with pytest.raises(ValueError, match=r"blocks\.0\.mlp\.fc1\.weight: expected \(96, 32\)"):
        _ours("encoder_padded_windows", state, mlp_dim=96)


def test_an_original_sam_checkpoint_loads_as_timm_s_filter_reads_it(references):
    """SAM's own `sam_vit_*.pth` layout: `image_encoder.*` with `mlp.lin1`; the prompt encoder
    and mask decoder are left out."""
    reference = references["encoder_padded_windows"]
    original = {
        f"image_encoder.{k.replace('mlp.fc', 'mlp.lin')}": v for k, v in reference["state"].items()
    }
    original["mask_decoder.iou_token.weight"] = np.zeros((1, 4), "float32")
    model = _ours("encoder_padded_windows", original)
    assert_close(to_numpy(model(reference["images"])), reference["pooled"])


def test_keras_round_trip(references, tmp_path):
    reference = references["classifier_224"]
    model = _ours("classifier_224", reference["state"])
    loaded = roundtrip_model(model, reference["images"], tmp_path)
    assert isinstance(loaded, SAMImageEncoder) and loaded.config == model.config
    assert loaded.preprocessing.mean == (0.485, 0.456, 0.406)  # timm's config for the name


def test_names_parse_to_the_family_with_timm_s_defaults():
    names = timm.list_models("samvit_*")
    assert sorted(names) == sorted(timm.list_models(module="vision_transformer_sam"))
    for name in names + timm.list_pretrained("samvit_*"):
        spec = N.parse_timm_name(name)
        assert spec.family.name == "samvit" and T.reads_timm_name(name), name
    from keras_vit.families.sam.timm import sam_config, timm_name_table

    huge = sam_config("samvit_huge_patch16")
    assert (huge.hidden_dim, huge.num_layers, huge.num_heads, huge.global_attention_indexes,
            huge.window_size, huge.neck_dim, huge.num_classes, huge.image_size) == (
        1280, 32, 16, (7, 15, 23, 31), 14, 256, 0, 1024)  # fmt: skip
    small = sam_config("samvit_base_patch16_224")
    assert (small.num_classes, small.absolute_position, small.neck_dim) == (1000, False, None)

    for name, block in (("samvit_large_patch16", 1), ("samvit_base_patch16_224", 0)):
        # our table names exactly timm's state dict (the head of _224 included)
        with torch.device("meta"):
            theirs = timm.create_model(name, **TIMM, img_size=32, global_attn_indexes=[block])
            theirs = theirs.state_dict()
        ours = keras_vit.from_timm(name, image_size=32, **OURS, global_attention_indexes=(block,))
        assert list(timm_name_table(ours)) == list(theirs), name


def test_config_refuses_bad_values():
    tiny = dict(image_size=32, global_attention_indexes=(1,), **OURS)
    with pytest.raises(ValueError, match=r"global_attention_indexes must be block indexes in "
                                         r"\[0, 2\).*Received: global_attention_indexes=\(2,\)"):
        SAMConfig(**{**tiny, "global_attention_indexes": (2,)})
    with pytest.raises(ValueError, match="image_size must be a multiple of patch_size=8"):
        SAMConfig(**{**tiny, "image_size": 36})
    with pytest.raises(ValueError, match="num_classes needs pooling='avg'"):
        SAMConfig(**tiny, pooling=None, num_classes=3)
    with pytest.raises(ValueError, match="window_size must be a non-negative int"):
        SAMConfig(**tiny, window_size=-2)
    with pytest.raises(ValueError, match="num_heads must divide hidden_dim"):
        SAMConfig(**{**tiny, "num_heads": 3})
    with pytest.raises(ValueError, match=r"Unknown SAMConfig argument\(s\) \['depth'\]"):
        keras_vit.from_timm("samvit_base_patch16", depth=2)
    with pytest.raises(ValueError, match="dynamic_image_size is not supported"):
        keras_vit.from_timm("samvit_base_patch16", dynamic_image_size=True)


_BY_NAME = """
import json, sys
import numpy as np
import keras, keras_vit
sizes = json.loads(sys.argv[2])
by_name = keras_vit.from_timm("samvit_base_patch16", pretrained=True, **sizes)
local = keras_vit.from_timm("samvit_base_patch16", sys.argv[1], **sizes)
images = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
diff = np.abs(keras.ops.convert_to_numpy(by_name(images) - local(images))).max()
print("max_diff", float(diff), type(by_name).__name__)
"""


@pytest.mark.slow  # a fresh process: huggingface_hub reads HF_ENDPOINT when it is imported
def test_by_name_through_the_loopback_hub(tmp_path):
    """`from_timm("samvit_base_patch16", pretrained=True)` downloads timm's default tag's repo
    (`timm/samvit_base_patch16.sa1b`) from a Hub on 127.0.0.1 and equals the local file."""
    pytest.importorskip("huggingface_hub")
    from keras_vit.weights.state_dict import write_safetensors
    from tests.weights.hub_server import HubServer

    sizes = dict(image_size=32, **OURS, window_size=2, global_attention_indexes=[1], neck_dim=8)
    model = timm.create_model("samvit_base_patch16", pretrained=False, img_size=32, **TIMM,
                              window_size=2, global_attn_indexes=[1], neck_chans=8)  # fmt: skip
    state = {k: v.detach().numpy() for k, v in perturb(torch, model).state_dict().items()}
    path = tmp_path / "model.safetensors"
    write_safetensors(state, str(path))
    server = HubServer().start()
    try:
        server.add_commit("timm/samvit_base_patch16.sa1b", {"model.safetensors": path.read_bytes()})
        env = dict(os.environ, PYTHONPATH=ROOT, HF_ENDPOINT=server.url,
                   HF_HOME=str(tmp_path / "home"), HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_XET="1", TF_CPP_MIN_LOG_LEVEL="3")  # fmt: skip
        env.pop("HF_HUB_OFFLINE", None)
        command = [sys.executable, "-c", _BY_NAME, str(path), json.dumps(sizes)]
        run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    finally:
        server.stop()
    assert run.returncode == 0, run.stderr[-3000:]
    assert "max_diff 0.0 SAMImageEncoder" in run.stdout
    assert server.requested("model.safetensors")


@pytest.mark.slow  # traces two graphs (tf2onnx and a SavedModel): ~20 s on a quiet machine
@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="traced by TensorFlow in this process (other backends export through a subprocess "
    "of the same trace: tests/export)",
)
def test_exported_for_serving(references, tmp_path):
    """The encoder to ONNX (onnxruntime equals Keras within 1e-5), the classifier to a
    SavedModel (its `serving_default` logits within 1e-5)."""
    ort = pytest.importorskip("onnxruntime")
    reference = references["encoder_padded_windows"]
    encoder = _ours("encoder_padded_windows", reference["state"])
    path = str(tmp_path / "sam.onnx")
    keras_vit.export_onnx(encoder, path, verbose=False)
    session = ort.InferenceSession(path)
    (pooled,) = session.run(None, {session.get_inputs()[0].name: reference["images"]})
    assert_close(pooled, reference["pooled"])
    import tensorflow as tf

    reference = references["classifier_224"]
    classifier = _ours("classifier_224", reference["state"])
    result = keras_vit.export_saved_model(classifier, str(tmp_path / "sam"), verbose=False)
    serve = tf.saved_model.load(result.path).signatures["serving_default"]
    logits = serve(images=tf.constant(reference["images"]))["logits"].numpy()
    assert_close(logits, reference["pooled"])


@pytest.mark.parametrize("exporter", ["export_timm", "export_huggingface"])
def test_checkpoint_exporters_refuse_it_before_writing(references, exporter, tmp_path):
    model = _ours("classifier_224", references["classifier_224"]["state"])
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="SAMImageEncoder .*Nothing was written"):
        getattr(keras_vit, exporter)(model, str(target))
    assert not os.path.exists(target) or not os.listdir(target)
