"""benchmarks/timm_sweep.py on two names (the whole sweep is a benchmark, not a test)."""

from tests.benchmarks.scripts import load_benchmark
from tests.weights.references import import_timm

import_timm()  # torch and timm before the script (it skips where timm is not installed)
sweep = load_benchmark("timm_sweep")


def test_one_name_per_mode_matches_timm(tmp_path):
    names = dict(sweep.read_names("test_vit*"))
    results = [
        sweep.check("test_vit", names["test_vit"], str(tmp_path)),
        sweep.check("test_vit3", names["test_vit3"], str(tmp_path), grid=(3, 2), depth=2,
                    resample=(2, 3)),  # fmt: skip
        sweep.check("test_vit", names["test_vit"], str(tmp_path), dynamic=(3, 4)),
    ]
    assert [r["status"] for r in results] == ["ok"] * 3, results
    assert results[0]["shrunk"] and results[1]["ours_kwargs"]["num_layers"] == 2
    summary = sweep.summarize(results)
    assert "test_vit" in summary and "total" in summary
    first = sweep.sample(list(names.items()), 1, 0.0, seed=0)
    assert [name for name, _ in first] == ["test_vit"]
