"""The tanh GELU on PyTorch's CPU kernels: `F.gelu(approximate="tanh")` against identical forms.

Issue 17 (item 5): keras_vit's PyTorch inference trailed timm's on CPU, and `torch.profiler` put
part of the gap on the official tanh GELU, whose PyTorch CPU kernel is slower than timm's erf
GELU. `0.5 (1 + tanh(z)) = sigmoid(2z)`, so `x * sigmoid(2z)` is the same function; this script
times it (in four passes over one buffer: `addcmul`, `mul_`, `sigmoid_`, `mul_`) against
`F.gelu(x, approximate="tanh")` and the erf GELU on the MLP activation of ViT-B/16 at batch 8
(1576 x 3072), and prints the largest difference from a float64 tanh GELU on that tensor and on
x in [-10, 10].

    python benchmarks/bench_gelu_torch.py --threads 1 --rounds 60

Timings are this process's CPU time (`time.process_time`), forms alternated round by round, so
that other jobs on a shared machine disturb them less; the table gives the minimum and median.
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

TWO_K = 2.0 * math.sqrt(2.0 / math.pi)
TWO_K_C = TWO_K * 0.044715


def gelu_sigmoid(x):
    """`x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))`: the tanh GELU, without gradients."""
    z = torch.addcmul(x.new_tensor(TWO_K), x, x, value=TWO_K_C)  # 2k + 2kc x^2
    z.mul_(x)
    return z.sigmoid_().mul_(x)


FORMS = {
    "F.gelu tanh (keras_vit)": lambda x: F.gelu(x, approximate="tanh"),
    "x * sigmoid(2z)": gelu_sigmoid,
    "F.gelu erf (timm; other numerics)": F.gelu,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(1576, 3072) * 2
    grid = torch.linspace(-10, 10, 2_000_001)
    times = {name: [] for name in FORMS}
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, form in FORMS.items():
                start = time.process_time()
                form(x)
                times[name].append(time.process_time() - start)
        print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds, "
              "(1576, 3072) float32")
        print("| form | min ms | median ms | max abs diff from float64 tanh GELU "
              "(that tensor; x in [-10, 10]) |")
        print("|---|---|---|---|")
        for name, form in FORMS.items():
            diffs = [
                float((form(t).double() - F.gelu(t.double(), approximate="tanh")).abs().max())
                for t in (x, grid)
            ]
            print(f"| {name} | {1e3 * min(times[name]):.2f} "
                  f"| {1e3 * statistics.median(times[name]):.2f} "
                  f"| {diffs[0]:.2e}; {diffs[1]:.2e} |")


if __name__ == "__main__":
    main()
