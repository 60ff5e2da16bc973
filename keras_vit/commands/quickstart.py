"""`keras-vit quickstart`: train a small ViT on scikit-learn's digits (offline) and save it."""

from keras_vit.quickstart import DEFAULTS


def register(subparsers):
    parser = subparsers.add_parser(
        "quickstart",
        help="train a small ViT from scratch on scikit-learn's digits (offline)",
        description=__doc__,
    )
    parser.add_argument("--out", default="runs/quickstart", help="output folder (model.keras, metrics.json)")
    parser.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--lr", type=float, default=DEFAULTS["learning_rate"])
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity (0, 1, 2)")
    parser.set_defaults(func=run)


def run(args):
    from keras_vit.quickstart import run as quickstart

    metrics = quickstart(
        out_dir=args.out,
        verbose=args.verbose,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        seed=args.seed,
    )
    print(
        f"backend={metrics['backend']} test_accuracy={metrics['test_accuracy']:.4f} "
        f"({metrics['test_examples']} held-out digits) time={metrics['seconds']:.1f}s "
        f"params={metrics['parameters']:,} saved={metrics['model_path']}"
    )
    return 0
