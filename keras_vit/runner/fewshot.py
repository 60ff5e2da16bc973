"""Few-shot linear evaluation recipe (paper Sec. 4.1, "Metrics").

Frozen features of a trained model (the pre-logits output when the model has one, else the pooled
token), N images per class sampled with a seed, closed-form regularised least squares to
{-1, 1}^K targets, the regulariser chosen on held-out training shots, accuracy of the argmax on the
test split (`keras_vit.training.fewshot`).

Command (defaults: `digits`, 1/5/10/25 shots; a few minutes on 2 CPU cores):

    keras-vit fewshot --model-path runs/pretrain/model.keras --out runs/fewshot
    keras-vit fewshot --out runs/fewshot     # no --model-path: runs the default pretrain first

Paper setting (ViT-B/16 ImageNet-21k checkpoint, ImageNet/CIFAR/Pets/Flowers 1/5/10/25-shot; one
GPU/TPU, minutes per dataset once features are extracted):

    keras-vit fewshot --model-path b16.keras --dataset tfds:cifar10 --data-dir DIR --image-size 224

Expected: the paper reports e.g. ViT-B/32 (JFT) ImageNet 5-shot about 60% (Figure 3/4); on digits
with the default pretrain model, 10-shot accuracy well above chance (measured numbers are in
benchmarks/RESULTS.md).
"""

import os
import warnings

import keras
import numpy as np

from keras_vit import saving
from keras_vit.runner import backup, presets, pretrain
from keras_vit.runner.config import jsonable
from keras_vit.runner.output import check_not_interrupted, prepare_out, release_out
from keras_vit.runner.setup import load_data
from keras_vit.training import multihost
from keras_vit.training.fewshot import fewshot_accuracy

# The settings (data in keras_vit.runner.presets, read there without a framework).
DEFAULTS = presets.FEWSHOT_DEFAULTS
get_config = presets.fewshot_config


def feature_model(model):
    """The frozen representation: `pre_logits` output if present, else the pooled token.

    Found through the model's roles (`model.pre_logits`, `model.pooling`); a model without
    them (a token-sequence encoder) is its own representation.
    """
    for role in ("pre_logits", "pooling"):
        layer = getattr(model, role, None)
        if layer is not None:
            return keras.Model(model.input, layer.output, name="fewshot_features")
    return model


def model_spec(model):
    """The model's input spec when it is not the official `[-1, 1]` (else None: the default
    evaluation pipeline)."""
    spec = getattr(getattr(model, "config", None), "preprocessing", None)
    return None if spec is None or spec == type(spec)() else spec


def extract(features, source, image_size, batch_size, preprocessing=None):
    from keras_vit import data

    ds = data.eval_pipeline(
        source, image_size=image_size, batch_size=batch_size, preprocessing=preprocessing
    )
    feats, labels = [], []
    for x, y in ds.as_numpy_iterator():
        feats.append(keras.ops.convert_to_numpy(features(x, training=False)))
        labels.append(y.argmax(-1))
    return np.concatenate(feats).astype("float32"), np.concatenate(labels)


def run(config, pretrain_config=None):
    """Runs few-shot evaluation; returns the metrics (also in `out/metrics.json`).

    Without `model_path`, first runs the pretrain recipe (`pretrain_config`, default: its digits
    preset) into `out/pretrain` and evaluates that model (a finished one there is reused).
    """
    if multihost.asked_by_environment():
        raise ValueError(
            "Few-shot evaluation runs in one process, but Keras' KERAS_DISTRIBUTION_* variables "
            "ask for several: unset them (and run `keras-vit pretrain` on several processes "
            "first if needed, then give its model with --model-path)."
        )
    out = prepare_out(config)
    try:
        metrics = _evaluate(config, out, pretrain_config)
    except BaseException:
        release_out(out, failed=True)
        raise
    release_out(out)
    return metrics


def _evaluate(config, out, pretrain_config):
    keras.utils.set_random_seed(config["seed"])
    path = config["model_path"]
    if path is None:
        warnings.warn(
            "No model_path (--model-path): a model is pre-trained first with the pretrain "
            f"recipe's digits preset (minutes) into {os.path.join(out, 'pretrain')}, and its "
            "features are evaluated. Give --model-path MODEL.keras to evaluate a model of "
            "yours.",
            stacklevel=2,
        )
        pconfig = dict(pretrain_config or pretrain.get_config())
        pconfig.update(out=os.path.join(out, "pretrain"), overwrite=config["overwrite"])
        path = os.path.join(pconfig["out"], "model.keras")
        if config["overwrite"] or not os.path.exists(os.path.join(pconfig["out"], "metrics.json")):
            pretrain.run(pconfig)
    if config["mixed_precision"]:
        keras.config.set_dtype_policy(config["mixed_precision"])
    model = saving.load_model(path)
    from keras_vit.models.config import check_not_pretraining_model  # (models loads a backend)

    # An MAE / MPP model has no image-to-features graph (`model.input` was an AttributeError).
    check_not_pretraining_model(
        model, f"fewshot's model_path (--model-path) {path!r}",
        use="Evaluate that (pretrain-mae and pretrain-mpp save it as encoder.keras)",
    )  # fmt: skip
    if getattr(getattr(model, "config", None), "naflex", False) or isinstance(model.input, dict):
        raise ValueError(
            f"fewshot evaluates image models; model_path (--model-path) {path!r} is a NaFlex "
            "model (it takes patch batches, not images). Evaluate its fixed-size twin, or a "
            "plain ViT."
        )
    image_size = config["image_size"] or tuple(model.input_shape[1:3])
    train, test = load_data(config)
    features = feature_model(model)
    spec = model_spec(model)  # a timm / transformers import: its mean, std and crop
    x_train, y_train = extract(features, train, image_size, config["batch_size"], spec)
    x_test, y_test = extract(features, test, image_size, config["batch_size"], spec)
    per_seed = [
        fewshot_accuracy(
            x_train, y_train, x_test, y_test, train.num_classes, config["shots"], seed=seed
        )
        for seed in config["seeds"]
    ]
    results = {}
    for n in config["shots"]:
        accs = [r[int(n)]["accuracy"] for r in per_seed]
        results[str(n)] = {
            "accuracy_mean": float(np.mean(accs)),
            "accuracy_std": float(np.std(accs)),
            "accuracy_per_seed": accs,
            "l2_per_seed": [r[int(n)]["l2"] for r in per_seed],
        }
    metrics = {
        "recipe": "fewshot",
        "backend": keras.backend.backend(),
        "model_path": path,
        "dataset": config["dataset"],
        "feature_dim": int(x_train.shape[-1]),
        "num_test_examples": int(len(y_test)),
        "shots": results,
        "config": jsonable(config),
    }
    check_not_interrupted()
    backup.write_json(os.path.join(out, "metrics.json"), metrics)
    for n, r in results.items():
        print(f"{n}-shot: {r['accuracy_mean']:.4f} +- {r['accuracy_std']:.4f}")
    return metrics
