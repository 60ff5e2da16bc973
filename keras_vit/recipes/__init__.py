"""Training recipes (config + runner). `recipes/*.py` at the repository root are thin scripts
that call these; the `keras-vit pretrain|finetune|fewshot` commands do the same."""
