"""The quickstart's default settings, importable without a framework (the CLI shows them in
`keras-vit quickstart --help`)."""

# The settings `train` takes as keyword overrides (the model, the schedule and the seed).
DEFAULTS = dict(
    # a 4-layer width-64 ViT (MLP 128, 4 heads) cutting 16 px digits into 4 px patches
    image_size=16, patch_size=4, num_layers=4, hidden_dim=64, mlp_dim=128, num_heads=4,
    # 60 epochs of batch 64, AdamW 2e-3 with weight decay 0.05 after 3 warm-up epochs
    epochs=60, batch_size=64, learning_rate=2e-3, weight_decay=0.05, warmup_epochs=3,
    label_smoothing=0.1,
    seed=0,
    # no validation split: the quickstart evaluates the test split once, after training; > 0
    # holds out that share of the training digits and validates on it after every epoch
    validation_fraction=0.0,
)
