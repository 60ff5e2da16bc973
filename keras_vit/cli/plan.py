"""`keras-vit plan NAME --mesh 8x1 --strategy fsdp --batch-size 256`: the memory plan's table.

`keras_vit.distribution.memory_plan` for a model too big to build here: parameters, gradients,
optimizer state and activations per device, and whether they fit a device of `--device-memory`
GB. The compiled analysis runs on this host's CPU devices: the command starts JAX (Keras' JAX
backend unless `KERAS_BACKEND` says otherwise) with as many virtual CPU devices as the mesh has.
"""

import os
import sys

from keras_vit.cli.types import image_size, mesh_shape, positive_float, positive_int

STRATEGIES = ("fsdp", "tensor_parallel", "fsdp_tp")
OPTIMIZERS = ("adamw", "adam", "lion", "momentum", "sgd")
DTYPES = ("float32", "bfloat16", "mixed_bfloat16", "float16", "mixed_float16")


def plan_flags(parser):
    parser.add_argument(
        "model", metavar="NAME", help="a variant (g/14), a timm model name (vit_7b_patch16_dinov3)"
    )
    parser.add_argument(
        "--mesh", type=mesh_shape, required=True, metavar="BATCHxMODEL", help="e.g. 8x1, 16x4"
    )
    parser.add_argument("--strategy", choices=STRATEGIES, default="fsdp_tp")
    parser.add_argument("--batch-size", dest="batch_size", type=positive_int, required=True,
                        help="the global batch")  # fmt: skip
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    parser.add_argument("--image-size", dest="image_size", type=image_size,
                        help="default: the model's")  # fmt: skip
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="Keras dtype policy")
    parser.add_argument("--remat", action="store_true", help="rematerialise each block")
    parser.add_argument(
        "--device-memory", dest="device_memory", type=positive_float, default=80.0,
        metavar="GB", help="memory of one device, for the verdict (default 80)",
    )  # fmt: skip


def _start_jax(devices):
    """Keras' JAX backend with `devices` virtual CPU devices, set before JAX loads."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if "jax" in sys.modules:
        return
    flag = "--xla_force_host_platform_device_count"
    flags = os.environ.get("XLA_FLAGS", "")
    if flag not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {flag}={devices}".strip()


def run_plan(args):
    _start_jax(args.mesh[0] * args.mesh[1])
    from keras_vit.distribution.plan import format_plan, memory_plan

    plan = memory_plan(
        args.model,
        args.mesh,
        strategy=args.strategy,
        optimizer=args.optimizer,
        batch_size=args.batch_size,
        image_size=args.image_size,
        dtype=args.dtype,
        remat=args.remat,
    )
    batch, model = args.mesh
    title = (
        f"{args.model}: {args.strategy} on {batch}x{model} devices, batch {args.batch_size}, "
        f"{args.optimizer}, {args.dtype}{', remat' if args.remat else ''} (per device)"
    )
    print(format_plan(plan, device_bytes=args.device_memory * 1e9, title=title))
    return 0
