"""The recipe runner: one code path for every training recipe (and the few-shot evaluation).

`run_training(config, build_model, recipe)` checks the config and the output folder, loads the
data, plans the steps, builds and compiles the model, trains with `model.fit`, evaluates, saves
and writes metrics.json. A recipe module only holds its config (paper and digits numbers), its
model builder and what differs (`compile_model` / `finish` hooks, e.g. masked patch prediction's
loss and encoder artefact). Artefacts in `out`:
    backup/            the resume state (`AtomicBackupAndRestore`: written atomically, the previous
                       good backup kept); rerunning the same command after a kill resumes at the
                       last finished epoch; removed once the run has finished
    checkpoints/last.keras, checkpoints/best.keras (best accuracy on the validation split, never
                       the test split; none without a validation split); `checkpoints=False`
                       turns them off
    logs/              TensorBoard (`tensorboard=False` turns it off)
    log.csv            per-epoch metrics (one row per epoch, across resumes)
    model.keras        the trained model
    model.sharded      instead of model.keras for a model sharded over devices (`--distribution
                       fsdp|tensor_parallel|fsdp_tp`; the checkpoints and backups then too:
                       `last.sharded`, `latest.sharded`): every process writes the blocks its
                       devices hold, nothing is gathered (`keras_vit.distribution.checkpoint`);
                       `keras_vit.load_model` and `--init` read it onto any mesh
    metrics.json       config, the test split's metrics (evaluated once, after training),
                       per-epoch history (`val_*`: the validation split), `splits` (each split's
                       size, origin and figures), throughput (written last: its presence marks
                       a finished run)

Nothing is replaced unless asked: the `out` of a finished run raises `FileExistsError` unless
`overwrite=True` (which first removes the old artefacts); an interrupted run resumes.

Several processes (machines) train one model on JAX when the config (`job_addresses`,
`num_processes`, `process_id`, `multi_host`) or Keras' `KERAS_DISTRIBUTION_*` variables ask for it
(`keras_vit.training.multihost`): every process runs the same command, `batch_size` is the global
batch (Keras gives each process its slice), process 0 alone writes into `out`, and every process
must read the same `out/backup` to resume (a shared folder).
"""
