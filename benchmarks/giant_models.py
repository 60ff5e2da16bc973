"""Giant ViTs across devices (issue 54): layouts, step time, memory plans, the peak of a load.

Each part runs in its own process (the virtual device count is fixed when JAX starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 KERAS_BACKEND=jax \\
        python benchmarks/giant_models.py layouts     # bytes per device, 5 families x strategies
    ... python benchmarks/giant_models.py steps       # step time fsdp vs data parallel (CPU)
    ... python benchmarks/giant_models.py check       # memory_plan against Keras' own step
    XLA_FLAGS=--xla_force_host_platform_device_count=64 KERAS_BACKEND=jax \\
        python benchmarks/giant_models.py plans --devices 64   # DINOv3-7B, InternViT-6B, ...
    ... python benchmarks/giant_models.py load-peak --write DIR   # once: the checkpoint
    ... python benchmarks/giant_models.py load-peak --read DIR [--plain]  # a fresh process each

`layouts` builds each family at 2 blocks (real widths) sharded on the 8 devices and sums the
bytes each device holds (the addressable shards of every variable). `check` compares the plan
of a reduced-depth model with what Keras compiles and allocates for it: the variables' shards
on device 0 and the compiled training step's temporaries (`memory_analysis`). `load-peak`
measures the process's peak resident memory (`ru_maxrss`) above what it held before the load.
"""

import argparse
import math
import os
import resource
import sys
import time

FAMILIES = {  # timm names, built at 2 blocks with their real widths
    "vit": "vit_large_patch16_224",
    "eva02": "eva02_large_patch14_224",
    "siglip": "vit_so400m_patch14_siglip_224",
    "aimv2": "aimv2_3b_patch14_224",
    "dinov3": "vit_7b_patch16_dinov3",
}
STRATEGIES = (("fsdp", (8, 1)), ("tensor_parallel", (1, 8)), ("fsdp_tp", (4, 2)))


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _device_bytes(model, device):
    total = 0
    for variable in model.weights:
        for shard in variable.value.addressable_shards:
            if shard.device == device:
                total += shard.data.nbytes
    return total


def layouts(args):
    import jax
    import keras

    from keras_vit import distribution as kd
    from keras_vit.models.encoder import build_model
    from keras_vit.weights.timm.reader import timm_config

    print("| family (timm name, 2 blocks) | params (MB) | strategy | mesh | MB on device 0 | "
          "/ total | largest device |")
    print("|---|---:|---|---|---:|---:|---:|")
    for family, name in FAMILIES.items():
        config = timm_config(name, num_layers=2)
        for strategy, mesh in STRATEGIES:
            try:
                with kd.model_parallel(strategy, mesh_shape=mesh).scope():
                    model = build_model(config)
            except ValueError as error:
                print(f"| {family} ({name}) | | {strategy} | {mesh[0]}x{mesh[1]} | refused: "
                      f"{str(error)[:120]} | | |")
                continue
            total = sum(math.prod(v.shape) * 4 for v in model.weights)
            per = [_device_bytes(model, d) for d in jax.devices()]
            print(f"| {family} ({name}) | {total / 1e6:,.0f} | {strategy} | {mesh[0]}x{mesh[1]} "
                  f"| {per[0] / 1e6:,.1f} | {per[0] / total:.3f} | {max(per) / 1e6:,.1f} |")
            del model
            keras.backend.clear_session()


def steps(args):
    import keras
    import numpy as np

    import keras_vit
    from keras_vit import distribution as kd
    from keras_vit.training.distribution import distribution_scope

    options = dict(image_size=64, num_classes=10, num_layers=4)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (args.batch, 64, 64, 3)).astype("float32")
    y = np.eye(10, dtype="float32")[rng.integers(0, 10, args.batch)]
    arms = {
        "data_parallel": lambda: distribution_scope("data_parallel"),
        "fsdp (8x1)": lambda: kd.model_parallel("fsdp", mesh_shape=(8, 1)).scope(),
        "fsdp_tp (4x2)": lambda: kd.model_parallel("fsdp_tp", mesh_shape=(4, 2)).scope(),
    }
    results = {}
    for arm, scope in arms.items():
        with scope():
            model = keras_vit.ViT("S/16", **options)
            model.compile(keras.optimizers.AdamW(1e-3), "categorical_crossentropy")
            model.train_on_batch(x, y)  # compile
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                model.train_on_batch(x, y)
                times.append(time.perf_counter() - start)
        results[arm] = float(np.median(times))
        keras.backend.clear_session()
    base = results["data_parallel"]
    print(f"ViT-S/16, 4 blocks, 64 px, batch {args.batch}, AdamW; 8 virtual CPU devices "
          "(CPU-only: the collectives are memory copies here)")
    for arm, seconds in results.items():
        print(f"| {arm} | {seconds * 1e3:,.0f} ms | {seconds / base:.2f}x data parallel |")


PLANS = {
    "DINOv3-7B (vit_7b_patch16_dinov3)": ("vit_7b_patch16_dinov3", {}),
    "InternViT-6B (shape: width 3200, 45 blocks, 25 heads, 448 px)": (
        "G/14",
        dict(hidden_dim=3200, num_layers=45, num_heads=25, mlp_dim=12800, image_size=448,
             qk_norm=True, norm="rmsnorm", layer_scale_init_value=0.1, include_top=False),
    ),
    "AIMv2-3B (aimv2_3b_patch14_224)": ("aimv2_3b_patch14_224", {}),
    "ViT-22B shape (width 6144, 48 blocks, 48 heads, parallel-scaling, qk-norm)": (
        "G/14",
        dict(hidden_dim=6144, num_layers=48, num_heads=48, mlp_dim=24576, image_size=224,
             qk_norm=True, block_kind="parallel_scaling", include_top=False),
    ),
}


def plans(args):
    from keras_vit.distribution.abstract import model_config
    from keras_vit.distribution.plan import memory_plan

    n = args.devices
    meshes = {8: (("fsdp", (8, 1)), ("fsdp_tp", (4, 2))), 64: (("fsdp", (64, 1)),
                                                             ("fsdp_tp", (8, 8)))}[n]
    print("| model | strategy | mesh | batch | params | grads | optimizer | activations | "
          "total (GB per device) | fits 80 GB |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for label, (name, overrides) in PLANS.items():
        config = model_config(name, **overrides)
        for strategy, mesh in meshes:
            batch = mesh[0] * args.per_device
            try:
                plan = memory_plan(config, mesh, strategy=strategy, batch_size=batch,
                                   dtype=args.dtype, remat=args.remat)
            except ValueError as error:
                print(f"| {label} | {strategy} | {mesh[0]}x{mesh[1]} | {batch} | refused: "
                      f"{str(error)[:110]} |||||")
                continue
            gb = {k: v / 1e9 for k, v in plan.items()}
            print(f"| {label} | {strategy} | {mesh[0]}x{mesh[1]} | {batch} | {gb['params']:.2f} "
                  f"| {gb['gradients']:.2f} | {gb['optimizer']:.2f} | {gb['activations']:.2f} | "
                  f"{gb['total']:.2f} | {'yes' if plan['total'] <= 80e9 else 'no'} |", flush=True)


def check(args):
    """memory_plan against Keras' own compiled step at reduced depth on 8 virtual devices."""
    import jax
    import keras
    import numpy as np

    from keras_vit import distribution as kd
    from keras_vit.distribution.abstract import model_config
    from keras_vit.models.encoder import build_model

    device = jax.devices()[0]
    print("| model | strategy | plan: params+grads+opt / activations / total (MB) | Keras: "
          "state on device 0 + step temporaries = total (MB) | plan / Keras |")
    print("|---|---|---|---|---:|")
    for name, overrides in (("L/16", dict(num_layers=4, image_size=128, num_classes=16)),
                            ("vit_7b_patch16_dinov3", dict(num_layers=3, image_size=64))):
        config = model_config(name, **overrides)
        for strategy, mesh in (("fsdp", (8, 1)), ("fsdp_tp", (4, 2))):
            batch = 16
            plan = kd.memory_plan(config, mesh, strategy=strategy, batch_size=batch)
            with kd.model_parallel(strategy, mesh_shape=mesh).scope():
                model = build_model(config)
                model.compile(keras.optimizers.AdamW(1e-3), keras.losses.MeanSquaredError())
                model.optimizer.build(model.trainable_variables)
                out = model.output_shape
                x = np.zeros((batch, *config.image_size, 3), "float32")
                y = np.zeros((batch, *out[1:]), "float32")
                state = (
                    [v.value for v in model.trainable_variables],
                    [v.value for v in model.non_trainable_variables],
                    [v.value for v in model.optimizer.variables],
                    [v.value for v in model.metrics_variables],
                )
                dist = keras.distribution.distribution()
                data = tuple(
                    jax.device_put(a, dist.get_data_layout(a.shape).backend_layout) for a in (x, y)
                )
                step = jax.jit(model.train_step, donate_argnums=0,
                               out_shardings=(None, model._get_state_sharding_spec()))
                analysis = step.lower(state, (data[0], data[1], None)).compile().memory_analysis()
                held = _device_bytes(model, device) + sum(
                    s.data.nbytes for v in model.optimizer.variables
                    for s in v.value.addressable_shards if s.device == device
                )
                real = held + analysis.temp_size_in_bytes + x.nbytes // mesh[0]
            keras.backend.clear_session()
            state_plan = plan["params"] + plan["gradients"] + plan["optimizer"]
            print(f"| {name} {overrides} | {strategy} {mesh[0]}x{mesh[1]} | "
                  f"{state_plan / 1e6:,.1f} / {plan['activations'] / 1e6:,.1f} / "
                  f"{plan['total'] / 1e6:,.1f} | {held / 1e6:,.1f} + "
                  f"{analysis.temp_size_in_bytes / 1e6:,.1f} = {real / 1e6:,.1f} | "
                  f"{plan['total'] / real:.3f} |", flush=True)


def load_peak(args):
    if args.write:
        import keras_vit

        os.makedirs(args.write, exist_ok=True)
        model = keras_vit.from_timm(args.name, num_layers=args.layers, num_classes=0)
        path = os.path.join(args.write, "model.safetensors")
        keras_vit.export_timm(model, path, overwrite=True)
        print(path, os.path.getsize(path) / 1e9, "GB")
        return
    import keras

    import keras_vit
    from keras_vit import distribution as kd

    path = os.path.join(args.read, "model.safetensors")
    size = os.path.getsize(path)
    before = _rss_mb()
    start = time.perf_counter()
    if args.plain:
        model = keras_vit.from_timm(args.name, path, num_layers=args.layers)
    else:
        with kd.model_parallel("fsdp", mesh_shape=(8, 1)).scope():
            model = keras_vit.from_timm(args.name, path, num_layers=args.layers)
    seconds = time.perf_counter() - start
    peak = _rss_mb() - before
    print(f"{'plain' if args.plain else 'fsdp 8x1'} load of {args.name} ({args.layers} blocks, "
          f"{size / 1e9:.2f} GB file): peak +{peak / 1e3:.2f} GB = {peak * 1e6 / size:.2f}x the "
          f"file, {seconds:.0f} s; {len(model.weights)} weights on {keras.backend.backend()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=("layouts", "steps", "plans", "check", "load-peak"))
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--per-device", dest="per_device", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--remat", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--name", default="vit_large_patch16_224")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--write")
    parser.add_argument("--read")
    parser.add_argument("--plain", action="store_true")
    args = parser.parse_args(argv)
    {"layouts": layouts, "steps": steps, "plans": plans, "check": check,
     "load-peak": load_peak}[args.part](args)


if __name__ == "__main__":
    sys.exit(main())
