"""The client side of the loopback Hub tests, run in a subprocess (tests/weights/test_hub.py).

`huggingface_hub` reads `HF_ENDPOINT`, `HF_HOME` and `HF_HUB_OFFLINE` when it is first imported,
so each environment gets its own process. Usage:

    python tests/weights/hub_client.py STEPS.json RESULTS.json

STEPS.json: a list of `{"id", "loader": "timm" | "huggingface" | "init", "source", "kwargs",
"local"}`; each step loads `source` by name (`from_timm(source, pretrained=True, **kwargs)`,
`from_huggingface(source, **kwargs)`, or `keras-vit finetune --init source`'s
`load_init_model`) and, where `local` is given (a file for timm, a folder
for transformers), the same model from that local copy, and records the largest difference
of their outputs on one image batch, and the input spec the model carries (timm's
`pretrained_cfg` terms), or the error (type and message) and the seconds taken.
"""

import json
import sys
import time

import numpy as np


def _run(step):
    import keras

    import keras_vit

    kwargs = dict(step.get("kwargs") or {})
    if step["loader"] == "timm":
        model = keras_vit.from_timm(step["source"], pretrained=True, **kwargs)
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
    if step.get("local"):
        if step["loader"] == "timm":
            kwargs.pop("cache_dir", None)
            kwargs.pop("revision", None)
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
