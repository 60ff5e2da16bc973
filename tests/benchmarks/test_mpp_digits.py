"""benchmarks/mpp_digits.py: its data helpers (the NumPy/SciPy digits path, moved there from
keras_vit.quickstart when the quickstart moved to the recipe runner), its protocol helpers
(validation split, selection, paired statistics, summary) and a tiny end-to-end run."""

import json
import os

import numpy as np
import pytest

from tests.benchmarks.scripts import load_benchmark

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("mpp_digits")


def test_digits_split_is_fixed_and_scaled(bench):
    x_train, x_test, y_train, y_test = bench.load_digits(image_size=16)
    assert x_train.shape == (1257, 16, 16, 1) and x_test.shape == (540, 16, 16, 1)
    assert 0 <= x_train.min() and x_train.max() <= 255
    np.testing.assert_array_equal(bench.load_digits(image_size=16)[3], y_test)


def test_random_affine_identity_and_shape(bench):
    rng = np.random.default_rng(0)
    images = np.random.rand(4, 16, 16, 1).astype("float32")
    same = bench.random_affine(images, rng, max_shift=0, max_rotation=0, scale=(1, 1))
    np.testing.assert_allclose(same, images, atol=1e-6)
    moved = bench.random_affine(images, rng)
    assert moved.shape == images.shape and not np.allclose(moved, images)


# ----------------------------------------------------------------------------- protocol helpers


def test_parse_seeds_targets_and_lists(bench):
    assert bench.parse_seeds("0-2,7") == [0, 1, 2, 7]
    assert bench.parse_seeds("3-5,4") == [3, 4, 5]
    assert bench.parse_targets("all") == ("color", "downsampled", "pixels")
    assert bench.parse_targets("pixels,color") == ("pixels", "color")
    assert bench.parse_floats("3e-4,1e-3", "--finetune-lrs") == [3e-4, 1e-3]
    assert bench.parse_shots("") == [] and bench.parse_shots("1,25") == [1, 25]
    for bad in ("", "a", "5-3", "-1"):
        with pytest.raises(ValueError, match="--seeds"):
            bench.parse_seeds(bad)
    with pytest.raises(ValueError, match="Received: 'colour'"):
        bench.parse_targets("colour")
    with pytest.raises(ValueError, match="positive"):
        bench.parse_floats("0,1e-3", "--finetune-lrs")
    with pytest.raises(ValueError, match="--shots"):
        bench.parse_shots("0")


def test_check_args_errors(bench):
    parser = bench.build_parser()
    with pytest.raises(ValueError, match="--no-supervised|Drop --supervised"):
        bench.check_args(parser.parse_args(["--label-fraction", "1", "--supervised"]))
    with pytest.raises(ValueError, match="nothing can choose"):
        bench.check_args(parser.parse_args(["--val-fraction", "0"]))
    with pytest.raises(ValueError, match="--finetune-steps expects positive"):
        bench.check_args(parser.parse_args(["--finetune-steps", "0,500"]))
    old = parser.parse_args(["--val-fraction", "0", "--finetune-lr", "1e-3",
                             "--finetune-steps", "400", "--seeds", "0,1,2"])
    assert bench.check_args(old) == ([0, 1, 2], ("color",), [1e-3], [400], [1, 5, 10, 25])
    # The default protocol: >= 5 seeds, a validation split, a grid of rates and lengths.
    seeds, targets, lrs, lengths, shots = bench.check_args(parser.parse_args([]))
    assert len(seeds) >= 5 and len(lrs) >= 2 and len(lengths) >= 2 and shots == [1, 5, 10, 25]
    defaults = parser.parse_args([])
    assert defaults.val_fraction > 0 and not defaults.refit and targets == ("color",)


def test_split_labelled_is_stratified_disjoint_and_seeded(bench):
    labels = np.repeat(np.arange(10), 40)
    train, val, other = bench.split_labelled(labels, 0.1, 0.3, seed=3)
    assert len(train) + len(val) == 40 and len(other) == 360
    assert len(set(train) | set(val) | set(other)) == 400  # disjoint, complete
    np.testing.assert_array_equal(np.bincount(labels[np.r_[train, val]]), np.full(10, 4))
    assert len(val) == 12 and len(np.unique(labels[val])) == 10
    again = bench.split_labelled(labels, 0.1, 0.3, seed=3)
    np.testing.assert_array_equal(again[1], val)
    assert set(bench.split_labelled(labels, 0.1, 0.3, seed=4)[1]) != set(val)
    # The labelled subset does not depend on the validation share (the old protocol's subset).
    train0, val0, _ = bench.split_labelled(labels, 0.1, 0.0, seed=3)
    assert len(val0) == 0 and set(train0) == set(train) | set(val)
    train1, val1, other1 = bench.split_labelled(labels, 1.0, 0.1, seed=0)
    assert len(other1) == 0 and len(train1) + len(val1) == 400
    with pytest.raises(ValueError, match="label_fraction"):
        bench.split_labelled(labels, 0.0, 0.3, seed=0)
    with pytest.raises(ValueError, match="val_fraction"):
        bench.split_labelled(labels, 0.1, 1.0, seed=0)


def _run(lr, steps, val_accuracy, val_loss, test_accuracy):
    return dict(learning_rate=lr, steps=steps, val_accuracy=val_accuracy, val_loss=val_loss,
                test_accuracy=test_accuracy)


def test_select_best_uses_validation_only(bench):
    grid = [
        _run(1e-3, 500, 0.8, 0.5, 0.99),
        _run(1e-3, 1500, 0.9, 0.4, 0.70),
        _run(3e-3, 1500, 0.9, 0.3, 0.60),
        _run(3e-3, 500, 0.9, 0.3, 0.95),
        _run(1e-3, 500, 0.9, 0.3, 0.50),
    ]
    # Best validation accuracy; then the lower loss; then the shorter run; then the smaller rate.
    assert bench.select_best(grid) is grid[4]
    assert bench.select_best(grid[:4]) is grid[3]
    assert bench.select_best(grid[:3]) is grid[2]
    only = [_run(1e-3, 400, None, None, 0.7)]
    assert bench.select_best(only) is only[0]  # no validation split: the one run
    with pytest.raises(ValueError, match="nothing can choose"):
        bench.select_best(only * 2)
    with pytest.raises(ValueError, match="at least one"):
        bench.select_best([])


def test_paired_stats_against_an_independent_computation(bench):
    import scipy.stats

    rng = np.random.default_rng(0)
    base = rng.uniform(0.7, 0.9, 7)
    gains = np.array([0.031, 0.020, 0.044, 0.043, 0.024, -0.004, 0.026])
    stats = bench.paired_stats(base + gains, base)
    d = 100 * gains
    assert stats["mean"] == pytest.approx(d.mean())
    assert stats["std"] == pytest.approx(d.std(ddof=1))
    t = d.mean() / (d.std(ddof=1) / np.sqrt(7))
    assert stats["t_test_p"] == pytest.approx(2 * scipy.stats.t.sf(abs(t), 6), rel=1e-4)
    assert (stats["wins"], stats["losses"], stats["ties"]) == (6, 1, 0)
    assert stats["sign_test_p"] == pytest.approx(2 * 8 / 2**7)  # P(<=1 or >=6 of 7)
    half = scipy.stats.t.ppf(0.975, 6) * d.std(ddof=1) / np.sqrt(7)
    np.testing.assert_allclose(stats["ci95"], [d.mean() - half, d.mean() + half])
    # Signed-rank: one negative gain with the smallest |d| -> W = 1, exact p = 2 * 2 / 2**7.
    assert stats["wilcoxon_p"] == pytest.approx(4 / 128)
    same = bench.paired_stats(base, base)
    assert same["t_test_p"] is None and same["wilcoxon_p"] is None and same["ties"] == 7


def _fake_runs(bench, arms, shots):
    rng = np.random.default_rng(1)
    runs = []
    for seed in range(3):
        arm_results = {
            arm: dict(
                test_accuracy=float(rng.uniform(0.8, 0.95)),
                selected=dict(steps=500 * (seed + 1), learning_rate=1e-3,
                              test_accuracy=float(rng.uniform(0.8, 0.95))),
            )
            for arm in arms
        }
        fewshot = {
            arm: {kind: {str(n): float(rng.uniform(0.3, 0.9)) for n in shots}
                  for kind in bench.FEATURES}
            for arm in arms
        }
        runs.append(dict(seed=seed, arms=arm_results, fewshot=fewshot))
    return runs


def test_summarise_and_tables(bench):
    arms = bench.arm_names(("color", "pixels"), supervised=True)
    assert arms == ["scratch", "mpp-color", "mpp-pixels", "supervised"]
    runs = _fake_runs(bench, arms, [1, 5])
    summary = bench.summarise(runs, arms, [1, 5])
    scratch = [r["arms"]["scratch"]["test_accuracy"] for r in runs]
    color = [r["arms"]["mpp-color"]["test_accuracy"] for r in runs]
    assert summary["test_accuracy"]["mpp-color"]["mean"] == pytest.approx(np.mean(color))
    assert summary["test_accuracy"]["mpp-color"]["std"] == pytest.approx(np.std(color, ddof=1))
    assert summary["gain_over_scratch"]["mpp-color"]["per_seed"] == [
        round(100 * (c - s), 2) for c, s in zip(color, scratch, strict=True)
    ]
    selected = [r["arms"]["mpp-pixels"]["selected"]["test_accuracy"] for r in runs]
    assert summary["selected_run_test_accuracy"]["mpp-pixels"]["mean"] == pytest.approx(
        np.mean(selected)
    )
    assert set(summary["supervised_minus_mpp"]) == {"mpp-color", "mpp-pixels"}
    assert summary["selected"]["scratch"]["steps"] == [500, 1000, 1500]
    gap5 = [r["fewshot"]["supervised"]["gap"]["5"] for r in runs]
    assert summary["fewshot"]["supervised"]["gap"]["5"]["mean"] == pytest.approx(np.mean(gap5))
    scratch5 = [r["fewshot"]["scratch"]["gap"]["5"] for r in runs]
    assert summary["fewshot_gain_over_scratch"]["supervised"]["gap"]["5"][
        "mean"
    ] == pytest.approx(100 * (np.mean(gap5) - np.mean(scratch5)))
    text = bench.format_tables(summary, arms, [1, 5])
    assert "| mpp-pixels |" in text and "supervised - mpp-color" in text
    assert "| 1-shot | 5-shot |" in text and "3 seeds" in text
    assert "- scratch: 0.001 x 500, 0.001 x 1000, 0.001 x 1500" in text


def _results_file(tmp_path, name, bench, runs, arms, shots, **settings):
    result = dict(
        backend="jax", command=f"python benchmarks/mpp_digits.py --out {name}",
        date="2026-11-24", arms=arms, runs=runs,
        settings=dict(seeds=[r["seed"] for r in runs], shots="1,5", out=name, **settings),
        summary=bench.summarise(runs, arms, shots), seconds=dict(wall=10.0, cpu=8.0),
    )
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(result))
    return str(path)


def test_summarise_merges_seeds_run_in_separate_processes(bench, tmp_path):
    arms = bench.arm_names(("color",), supervised=False)
    runs = _fake_runs(bench, arms, [1, 5])
    a = _results_file(tmp_path, "a", bench, [runs[2], runs[0]], arms, [1, 5], targets=["color"])
    b = _results_file(tmp_path, "b", bench, [runs[1]], arms, [1, 5], targets=["color"])
    merged = bench.merge_results([a, b])
    assert [r["seed"] for r in merged["runs"]] == [0, 1, 2]
    assert merged["settings"]["seeds"] == [0, 1, 2]
    whole = bench.summarise(runs, arms, [1, 5])
    assert merged["summary"]["gain_over_scratch"] == whole["gain_over_scratch"]
    assert merged["seconds"] == dict(wall=20.0, cpu=16.0)
    out = tmp_path / "merged"
    bench.main(["--summarise", a, b, "--out", str(out)])
    assert json.loads((out / "results.json").read_text())["settings"]["seeds"] == [0, 1, 2]
    other = _results_file(tmp_path, "c", bench, [runs[1]], arms, [1, 5], targets=["pixels"])
    with pytest.raises(ValueError, match="other settings or arms"):
        bench.merge_results([a, other])
    with pytest.raises(ValueError, match="more than one file"):
        bench.merge_results([a, a])


@pytest.fixture(scope="module")
def tiny_bench(bench):
    """The benchmark with a 1-layer width-16 model, so a whole run compiles quickly."""
    saved = dict(bench.MODEL)
    bench.MODEL.update(num_layers=1, hidden_dim=16, mlp_dim=32, num_heads=2)
    yield bench
    bench.MODEL.clear()
    bench.MODEL.update(saved)


@pytest.mark.slow
def test_training_pieces_run_and_transfer(tiny_bench):
    """pretrain_mpp / pretrain_supervised / finetune for a couple of steps, for real."""
    bench = tiny_bench
    x_train, x_test, y_train, y_test = bench.load_digits(image_size=16)
    args = bench.build_parser().parse_args(["--pretrain-steps", "2", "--batch-size", "8",
                                            "--finetune-batch-size", "8"])
    state, loss = bench.pretrain_mpp(x_train[:64], "color", args, seed=0)
    assert np.isfinite(loss)
    assert set(state) == {"patch_encoder", "encoderblock_0", "encoder_norm"}
    supervised, loss = bench.pretrain_supervised(x_train[:64], y_train[:64], args, seed=0)
    assert np.isfinite(loss) and set(supervised) == set(state)
    # The classifier starts from the pre-trained encoder (the `--init` path), with a zero head.
    model = bench.classifier(0, state)
    np.testing.assert_array_equal(
        model.get_layer("encoderblock_0").get_weights()[0], state["encoderblock_0"][0]
    )
    assert not model.get_layer("head").get_weights()[0].any()
    scores = bench.finetune(model, (x_train[:40], y_train[:40]), 1e-3, 2, args, 0,
                            {"val": (x_train[40:60], y_train[40:60]), "test": (x_test, y_test)})
    assert set(scores) == {"val", "test"}
    for accuracy, loss in scores.values():
        assert 0 <= accuracy <= 1 and np.isfinite(loss)
    # Training the classifier left the pre-trained state untouched (no shared buffers).
    again = bench.build_encoder(state, 0).get_layer("encoderblock_0").get_weights()[0]
    np.testing.assert_array_equal(again, state["encoderblock_0"][0])
    (feats,) = bench.features(state, [x_test[:5]], 0)
    assert feats["token"].shape == (5, 16) and feats["gap"].shape == (5, 16)


def test_main_wiring_selection_refit_and_summary(tiny_bench, tmp_path, monkeypatch, capsys):
    """The whole loop with the training replaced by a fake whose validation score is known."""
    bench = tiny_bench
    calls = []

    def fake_pretrain_mpp(x, target, args, seed):
        calls.append(("mpp", target, seed, len(x)))
        return bench.encoder_state(bench.build_encoder(None, seed + 100)), 1.0

    def fake_pretrain_supervised(x, y, args, seed):
        calls.append(("supervised", seed, len(x)))
        return bench.encoder_state(bench.build_encoder(None, seed + 200)), 0.5

    def fake_finetune(model, train, lr, steps, args, seed, evaluate):
        calls.append(("finetune", lr, steps, len(train[1]), tuple(evaluate)))
        # Validation prefers lr 1e-3 x 4 steps; the test score says otherwise (never used).
        good = lr == 1e-3 and steps == 4
        scores = {"test": (0.5 if good else 0.9, 1.0)}
        if "val" in evaluate:
            scores["val"] = (0.8 if good else 0.6, 0.3)
        return scores

    monkeypatch.setattr(bench, "pretrain_mpp", fake_pretrain_mpp)
    monkeypatch.setattr(bench, "pretrain_supervised", fake_pretrain_supervised)
    monkeypatch.setattr(bench, "finetune", fake_finetune)
    out = str(tmp_path / "bench")
    result = bench.main([
        "--seeds", "0,1", "--targets", "color,pixels", "--supervised", "--refit",
        "--finetune-steps", "2,4", "--finetune-lrs", "1e-3,3e-3", "--shots", "1", "--out", out,
    ])
    printed = capsys.readouterr().out
    assert "seed 1  fine-tune supervised" in printed and "| mpp-pixels |" in printed
    assert ("mpp", "pixels", 1, 1257) in calls and ("supervised", 0, 1257 - 125) in calls
    finetunes = [c for c in calls if c[0] == "finetune"]
    # Per seed and arm: the 2 x 2 grid on the 87 training images, then the refit of the chosen
    # (1e-3, 4) on all 125 labelled images, scored on the test split only.
    assert len(finetunes) == 2 * 4 * 5
    assert finetunes[4] == ("finetune", 1e-3, 4, 125, ("test",))
    assert {c[3] for c in finetunes if c[4] == ("val", "test")} == {87}
    with open(os.path.join(out, "results.json")) as f:
        saved = json.load(f)
    assert saved["arms"] == ["scratch", "mpp-color", "mpp-pixels", "supervised"]
    assert saved["summary"] == json.loads(json.dumps(result["summary"]))
    run = saved["runs"][1]
    assert (run["labelled"], run["finetune_images"], run["val_images"]) == (125, 87, 38)
    arm = run["arms"]["mpp-color"]
    assert (arm["selected"]["learning_rate"], arm["selected"]["steps"]) == (1e-3, 4)
    assert arm["selected"]["test_accuracy"] == 0.5 and arm["refit_test_accuracy"] == 0.5
    assert saved["summary"]["selected"]["scratch"] == dict(
        steps=[4, 4], learning_rates=[1e-3, 1e-3]
    )
    assert set(run["fewshot"]["mpp-color"]) == {"token", "gap"}
    assert 0 <= run["fewshot"]["supervised"]["gap"]["1"] <= 1
    assert saved["summary"]["gain_over_scratch"]["mpp-color"]["per_seed"] == [0.0, 0.0]
    assert saved["seconds"]["wall"] > 0 and saved["command"].startswith("python benchmarks/")
    # Without --refit the selected run is the result; the old protocol: no validation split.
    calls.clear()
    result = bench.main(["--seeds", "0", "--finetune-steps", "2,4", "--finetune-lrs", "1e-3,3e-3",
                         "--shots", "", "--out", out])
    assert len([c for c in calls if c[0] == "finetune"]) == 4 * 2
    arm = result["runs"][0]["arms"]["mpp-color"]
    assert "refit_test_accuracy" not in arm and arm["test_accuracy"] == 0.5
    calls.clear()
    bench.main(["--seeds", "0", "--val-fraction", "0", "--finetune-steps", "4",
                "--finetune-lrs", "1e-3", "--shots", "", "--pretrain-once", "--out", out])
    assert [c for c in calls if c[0] == "finetune"] == [("finetune", 1e-3, 4, 125, ("test",))] * 2
