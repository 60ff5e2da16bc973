"""Accuracy of the digits model in every serving precision, and quantization-aware training
(issue 55; the speed half is benchmarks/bench_serving.py).

1. trains the quickstart digits model (`keras_vit.runner.quickstart.train`: 16 px gray digits,
   4x4 patches, 4 layers, width 64), or loads `--model PATH`;
2. exports it in every precision: SavedModel float32 / bfloat16 / int8 (TensorFlow), ONNX
   float32 / int8 dynamic / int8 static (calibrated on `--calibration` training digits) /
   float16 (onnxruntime), LiteRT float32 / dynamic_int8 / int8; the test accuracy of each on the
   fixed stratified 30% split (540 digits) and its largest logit difference to Keras;
3. quantization-aware training (`keras_vit.quantization_aware`) against post-training
   quantization at `--qat-bits` weight bits (int8 inputs): PTQ is the fake-quant model
   calibrated on the training digits and not trained; QAT fine-tunes it `--epochs` epochs; the
   control fine-tunes the float model as long, then quantizes it (so the gain is QAT's, not the
   extra training). Each QAT model's integer ONNX export (`export_onnx`, its learned ranges) is
   evaluated against its fake-quant accuracy.

Command (about 10-20 minutes on 2 shared cores, most of it the TensorFlow exports):

    KERAS_BACKEND=jax python benchmarks/serving_digits.py --out runs/serving_digits
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit import data  # noqa: E402
from keras_vit.runner import quickstart  # noqa: E402
from keras_vit.training.qat import quantization_aware  # noqa: E402


def split(model, name):
    _, height, width, channels = model.inputs[0].shape
    source = data.load_source("digits", name, num_channels=channels)
    return data.numpy_arrays(
        data.eval_pipeline(source, image_size=(height, width), batch_size=256)
    )


def accuracy(logits, labels):
    return float((np.asarray(logits).argmax(-1) == labels).mean())


def onnx_logits(path, images):
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def saved_model_logits(path, images):
    import tensorflow as tf

    return tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(images))[
        "logits"
    ].numpy()


def litert_logits(path, images):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path).get_signature_runner()(images=images)["logits"]


def precisions(model_path, out, test, calibration):
    images, labels = test
    model = keras_vit.load_model(model_path)
    reference = keras.ops.convert_to_numpy(model.predict(images, batch_size=256, verbose=0))
    rows = [dict(artefact="Keras float32", accuracy=accuracy(reference, labels), diff=0.0)]
    jobs = []
    for precision in ("float32", "bfloat16", "int8"):
        path = f"{out}/saved_model_{precision}"
        jobs.append((f"SavedModel {precision}", path, saved_model_logits,
                     lambda p=path, q=precision: keras_vit.export_saved_model(
                         model_path, p, precision=q, overwrite=True, verbose=False)))  # fmt: skip
    for label, precision, data_ in (
        ("ONNX float32", "float32", None),
        ("ONNX int8 dynamic", "int8", None),
        ("ONNX int8 static", "int8", calibration),
        ("ONNX float16", "float16", None),
    ):
        path = f"{out}/{label.replace(' ', '_')}.onnx"
        jobs.append((label, path, onnx_logits,
                     lambda p=path, q=precision, d=data_: keras_vit.export_onnx(
                         model_path, p, precision=q, representative_data=d, overwrite=True,
                         verbose=False)))  # fmt: skip
    for quantize in (None, "dynamic_int8", "int8"):
        path = f"{out}/litert_{quantize or 'float32'}.tflite"
        jobs.append((f"LiteRT {quantize or 'float32'}", path, litert_logits,
                     lambda p=path, q=quantize: keras_vit.export_litert(
                         model_path, p, quantize=q,
                         representative_data=calibration if q == "int8" else None,
                         overwrite=True, verbose=False)))  # fmt: skip
    for label, path, run, export in jobs:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # bf16 / int8 on this CPU: said once
            export()
        logits = run(path, images)
        rows.append(
            dict(
                artefact=label,
                accuracy=accuracy(logits, labels),
                diff=float(np.abs(np.asarray(logits) - reference).max()),
            )
        )
        print(f"  {label}: {100 * rows[-1]['accuracy']:.2f}%", flush=True)
    return rows


def compile_for_finetuning(model, learning_rate):
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate, weight_decay=0.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )


def fake_quant_accuracy(model, test):
    images, labels = test
    return accuracy(keras.ops.convert_to_numpy(model.predict(images, batch_size=256, verbose=0)),
                    labels)  # fmt: skip


def qat_study(model_path, out, train, test, bits, epochs, learning_rate, seed):
    """PTQ, QAT and the control at `bits` weight bits; the integer ONNX of the 7/8-bit ones."""
    images, labels = train
    calibration = images[:256]
    result = dict(bits=bits, epochs=epochs, learning_rate=learning_rate)

    keras.utils.set_random_seed(seed)
    ptq = quantization_aware(keras_vit.load_model(model_path), calibration, weight_bits=bits)
    result["ptq"] = fake_quant_accuracy(ptq, test)

    keras.utils.set_random_seed(seed)
    qat = quantization_aware(keras_vit.load_model(model_path), calibration, weight_bits=bits)
    compile_for_finetuning(qat, learning_rate)
    qat.fit(images, labels, batch_size=64, epochs=epochs, verbose=0, shuffle=True)
    result["qat"] = fake_quant_accuracy(qat, test)

    keras.utils.set_random_seed(seed)
    control = keras_vit.load_model(model_path)
    compile_for_finetuning(control, learning_rate)
    control.fit(images, labels, batch_size=64, epochs=epochs, verbose=0, shuffle=True)
    result["control_float"] = fake_quant_accuracy(control, test)
    quantization_aware(control, calibration, weight_bits=bits)
    result["control_ptq"] = fake_quant_accuracy(control, test)

    # the integer ONNX graph of the QAT model, with its learned ranges
    path = f"{out}/qat_w{bits}.onnx"
    keras_vit.export_onnx(qat, path, overwrite=True, verbose=False)
    logits = onnx_logits(path, test[0])
    reference = keras.ops.convert_to_numpy(qat.predict(test[0], batch_size=256, verbose=0))
    result["qat_onnx"] = accuracy(logits, test[1])
    result["qat_onnx_max_logit_diff"] = float(np.abs(logits - reference).max())
    result["qat_onnx_agreement"] = float((logits.argmax(-1) == reference.argmax(-1)).mean())
    print(f"  QAT w{bits}: {result}", flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/serving_digits")
    parser.add_argument("--model", help="a trained .keras model (default: train the quickstart)")
    parser.add_argument("--calibration", type=int, default=200, help="calibration digits")
    parser.add_argument("--qat-bits", type=int, nargs="+", default=[7, 4])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-precisions", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    model_path = args.model
    if model_path is None:
        model_path = quickstart.train(f"{args.out}/quickstart", verbose=0, overwrite=True)[
            "model_path"
        ]
    model = keras_vit.load_model(model_path)
    test, train = split(model, "test"), split(model, "train")
    report = dict(model=model_path, backend=keras.backend.backend(), test=len(test[1]))
    if not args.skip_precisions:
        report["precisions"] = precisions(
            model_path, args.out, test, train[0][: args.calibration]
        )
    report["qat"] = [
        qat_study(model_path, args.out, train, test, bits, args.epochs, args.learning_rate,
                  args.seed)
        for bits in args.qat_bits
    ]  # fmt: skip
    print_tables(report)
    with open(f"{args.out}/results.json", "w") as f:
        json.dump(report, f, indent=1)


def print_tables(report):
    if "precisions" in report:
        base = report["precisions"][0]["accuracy"]
        print("\n| artefact | test accuracy | vs Keras float32 (points) | max logit diff |")
        print("|---|---:|---:|---:|")
        for row in report["precisions"]:
            print(f"| {row['artefact']} | {100 * row['accuracy']:.2f}% "
                  f"| {100 * (row['accuracy'] - base):+.2f} | {row['diff']:.2g} |")  # fmt: skip
    print("\n| weight bits | PTQ (fake quant) | QAT | float fine-tuned as long | its PTQ "
          "| QAT's integer ONNX | ONNX vs fake-quant argmax agreement |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for row in report["qat"]:
        print(f"| {row['bits']} | {100 * row['ptq']:.2f}% | {100 * row['qat']:.2f}% "
              f"| {100 * row['control_float']:.2f}% | {100 * row['control_ptq']:.2f}% "
              f"| {100 * row.get('qat_onnx', float('nan')):.2f}% "
              f"| {100 * row.get('qat_onnx_agreement', float('nan')):.1f}% |")  # fmt: skip


if __name__ == "__main__":
    main()
