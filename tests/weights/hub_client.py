"""The client side of the loopback Hub tests, run in a subprocess (tests/weights/test_hub.py).

`huggingface_hub` reads `HF_ENDPOINT`, `HF_HOME` and `HF_HUB_OFFLINE` when it is first imported,
so each environment gets its own process. Usage:

    python tests/weights/hub_client.py STEPS.json RESULTS.json

STEPS.json: a list of `{"id", "loader": "timm" | "huggingface" | "init" | "convert_timm" |
"cli", "source", "kwargs", "local"}`; each step loads `source` by name (`from_timm(source,
pretrained=True, **kwargs)`, `from_huggingface(source, **kwargs)`, `keras-vit finetune --init
source`'s `load_init_model`, `convert_timm(source, None, OUT, **kwargs)` (what `keras-vit
convert --from timm NAME OUT` runs), or `keras-vit convert --from huggingface source OUT` with
the step's `args`, the model read back from OUT) and, where `local` is given (a file for
timm, a folder for transformers), the same model from that local copy, and records the
largest difference of their outputs on one image batch, the input spec the model carries
(timm's `pretrained_cfg` terms) and its class names, or the error (type and message) and the
seconds taken. A `"spoil"` step copies each `[source, cached]` pair of its `files` over the
cached file (through the cache's link, into the blob), as a stale or damaged cache would be.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np


def _run(step):
    import keras

    import keras_vit

    kwargs = dict(step.get("kwargs") or {})
    if step["loader"] == "spoil":
        for source, cached in step["files"]:
            shutil.copyfile(source, os.path.realpath(cached))
        return {}
    if step["loader"] == "timm":
        model = keras_vit.from_timm(step["source"], pretrained=True, **kwargs)
    elif step["loader"] == "convert_timm":  # keras-vit convert --from timm NAME OUT
        from keras_vit.weights.convert import convert_timm

        out = os.path.join(tempfile.mkdtemp(), "model.keras")
        convert_timm(step["source"], None, out, **kwargs)
        model = keras_vit.load_model(out)
        step["loader"] = "timm"
    elif step["loader"] == "cli":  # keras-vit convert --from huggingface NAME OUT [args]
        from keras_vit.cli import main as cli

        out = os.path.join(tempfile.mkdtemp(), "model.keras")
        code = cli(["convert", "--from", "huggingface", step["source"], out, *step["args"]])
        if code != 0:
            raise RuntimeError(f"keras-vit convert exited with {code}")
        model = keras_vit.load_model(out)
        step["loader"] = "huggingface"
    elif step["loader"] == "init":  # keras-vit finetune --init NAME
        from keras_vit.runner.init_checkpoint import load_init_model

        size = kwargs.pop("image_size")
        config = {"init": step["source"], "image_size": size, "model_overrides": kwargs}
        model, kind = load_init_model(config)
        kwargs["image_size"] = size
        step["loader"] = "timm" if kind == "timm" else "huggingface"
    else:
        model = keras_vit.from_huggingface(step["source"], **kwargs)
    height, width = model.config.image_size
    images = np.random.default_rng(0).uniform(-1, 1, (2, height, width, 3)).astype("float32")
    result = {"output": keras.ops.convert_to_numpy(model(images)).tolist()}
    # the input spec the model carries (timm's pretrained_cfg terms), as fine-tuning uses it
    result["preprocessing"] = model.preprocessing.to_timm(model.config.image_size)
    names = model.config.class_names
    result["class_names"] = None if names is None else list(names)
    if step.get("local"):
        if step["loader"] == "timm":
            for key in ("cache_dir", "revision", "force_download"):
                kwargs.pop(key, None)
            local = keras_vit.from_timm(step["local_name"], step["local"], **kwargs)
        else:
            local = keras_vit.from_huggingface(step["local"])
        diff = np.abs(keras.ops.convert_to_numpy(local(images)) - np.array(result["output"]))
        result["max_diff"] = float(diff.max())
    return result


def main(steps_path, results_path):
    with open(steps_path) as f:
        steps = json.load(f)
    import keras_vit  # noqa: F401 - before any step: does it import huggingface_hub?

    results = {"_hub_imported_by_keras_vit": "huggingface_hub" in sys.modules}
    for step in steps:
        start = time.perf_counter()
        try:
            result = _run(step)
        except Exception as error:  # noqa: BLE001 - reported to the test
            result = {"error": type(error).__name__, "message": str(error)}
        result["seconds"] = time.perf_counter() - start
        results[step["id"]] = result
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
