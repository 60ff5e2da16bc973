"""`run_training`: the one training path of every recipe (see `keras_vit.runner`)."""

import os
import shutil
import time

from keras_vit.distribution.checkpoint import is_sharded_model, save_sharded
from keras_vit.runner import naflex
from keras_vit.runner.backup import atomic_write, sharded_form, write_json
from keras_vit.runner.callbacks import training_callbacks
from keras_vit.runner.compile import compile_classifier, evaluate_classifier
from keras_vit.runner.config import fit_verbosity, jsonable
from keras_vit.runner.output import check_not_interrupted, release_out
from keras_vit.runner.setup import prepare_run
from keras_vit.training import multihost
from keras_vit.training.distribution import distribution_scope, num_devices


def run_training(
    config,
    build_model,
    recipe,
    callbacks=(),
    compile=compile_classifier,
    evaluate=evaluate_classifier,
    finish=None,
):
    """Trains `build_model(num_classes, config)` on `config` with `model.fit`; writes artefacts.

    The one training path of every recipe: `prepare_run`, build and compile inside the
    distribution scope, `model.fit` with `training_callbacks`, evaluate, save `model.keras`
    (`model.sharded` for a model sharded over devices),
    write `metrics.json`, remove the backup, print a summary. With several processes every
    process trains and evaluates; process 0 alone writes files and prints (the others' Keras
    progress is silent).

    Args:
        config: dict (see `keras_vit.runner.pretrain.get_config`).
        build_model: callable `(num_classes, config) -> (keras.Model, info dict)`, called inside
            the distribution scope.
        recipe: str. Name recorded in metrics.json.
        callbacks: extra Keras callbacks, run after the runner's own.
        compile: callable `(model, config, setup) -> dict` that compiles the model; its dict is
            added to the metrics. Defaults to `compile_classifier`.
        evaluate: callable `(model, setup) -> dict` of final metrics. Defaults to
            `evaluate_classifier` (test loss and accuracy).
        finish: optional callable `(model, setup) -> dict` run after `model.keras` is saved
            (extra artefacts; in every process, so it must write in process 0 only); its dict
            is added to the metrics.

    Returns:
        The metrics dict also written to `out/metrics.json`.
    """
    with multihost.lost_peers_explained():
        return _run_training(config, build_model, recipe, callbacks, compile, evaluate, finish)


def _run_training(config, build_model, recipe, callbacks, compile, evaluate, finish):
    start = time.perf_counter()
    setup = prepare_run(config)
    try:
        metrics = _train(
            config, build_model, recipe, callbacks, compile, evaluate, finish, setup, start
        )
    except BaseException:
        release_out(setup.out, failed=True)
        raise
    release_out(setup.out)
    return metrics


def save_final_model(model, out):
    """Writes the trained model in every process; returns its path.

    `model.keras` (process 0 writes; variables sharded over processes gathered first), or,
    for a model sharded over devices, the sharded checkpoint `model.sharded` (every process
    writes its own blocks, nothing gathered; `keras_vit.load_model` reads it on any mesh).
    """
    if is_sharded_model(model):  # a LoRA model's adapters merged, as model.save() does
        return save_sharded(
            sharded_form(model)[0],
            os.path.join(out, "model.sharded"),
            include_optimizer=False,
            overwrite=True,
        )
    model_path = os.path.join(out, "model.keras")
    with multihost.saving(model) as writer:  # every process (sharded weights are gathered)
        if writer:
            atomic_write(model_path, model.save)
    return model_path


def _save_and_finish(model, out, finish, setup):
    path = save_final_model(model, out)
    return path, (finish(model, setup) if finish is not None else {})


def _train(config, build_model, recipe, callbacks, compile, evaluate, finish, setup, start):
    out = setup.out
    chief = multihost.is_chief()
    # Per-epoch validation and best.keras: the validation split only, never the test split.
    validation = bool(config["validation_freq"]) and setup.validation_source is not None
    scope = distribution_scope(
        config["distribution"],
        model_parallel_size=config.get("model_parallel_size"),
        mesh=config.get("mesh"),
    )
    with scope:
        devices = num_devices(config["distribution"])
        model, model_info = build_model(setup.train_source.num_classes, config)
        # The model's input spec (e.g. a DINOv2 --init: ImageNet mean and std) feeds the data.
        setup.use_preprocessing(config, getattr(model, "saved_model", model))
        patch_size = naflex.check_model(getattr(model, "saved_model", model), config)
        if patch_size is not None:
            setup.use_naflex(config, patch_size)
        extra = compile(model, config, setup) or {}
        history = model.fit(
            setup.train_ds,
            epochs=setup.epochs,
            steps_per_epoch=setup.steps_per_epoch,
            validation_data=setup.val_ds if validation else None,
            validation_steps=setup.val_steps,
            validation_freq=config["validation_freq"] or 1,
            callbacks=[*training_callbacks(setup, config, validation), *callbacks],
            shuffle=False,  # the tf.data pipeline is already shuffled (per epoch, seeded)
            verbose=fit_verbosity(config["verbose"]) if chief else 0,
        )
        results = evaluate(model, setup)
        check_not_interrupted()
        model = getattr(model, "saved_model", model)  # a training wrapper (Distiller): its model
        sharded = is_sharded_model(model)
        if sharded:  # written inside the distribution: every process its own blocks
            model_path, finished = _save_and_finish(model, out, finish, setup)
    if not sharded:
        model_path, finished = _save_and_finish(model, out, finish, setup)
    results.update(finished)
    metrics = {
        **setup.base_metrics(recipe, config),
        "num_devices": devices,
        "num_classes": setup.train_source.num_classes,
        "num_params": int(model.count_params()),
        **extra,
        **results,
        "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
        "throughput": setup.throughput.summary(),
        "model": model_info,
        "model_path": model_path,
        "seconds": round(time.perf_counter() - start, 1),
        "config": jsonable(config),
    }
    if not chief:
        return metrics
    check_not_interrupted()  # a Ctrl-C that a library swallowed: not a finished run
    write_json(os.path.join(out, "metrics.json"), metrics)
    shutil.rmtree(setup.backup_dir, ignore_errors=True)  # finished: nothing left to resume
    summary = ", ".join(
        f"{k.replace('_', ' ')} {v:.4f}" for k, v in results.items() if isinstance(v, float)
    )
    where = ""
    if setup.num_processes > 1:
        where = f" ({setup.num_processes} processes, {devices} devices)"
    print(
        f"{recipe}: {summary} on the {setup.eval_source.num_examples} examples of the test "
        f"split{where}; "
        f"artefacts in {out}"
    )
    return metrics
