"""Paired per-round ratios of two targets: their median, in how many rounds A won, and a bootstrap 95 % interval for the median.

Usage: python3 paired_ci.py ge|le "A1 A2 ..." "B1 B2 ..."  ->  "MEDIAN WINS ROUNDS LOW HIGH"
(ratios A/B to three decimals; a round is a win when A/B >= 1 with ge, <= 1 with le)

The rounds of a benchmark run are few (5 to 12) and the machine's speed
drifts between them, so a single median ratio says little about how sure
it is. Resampling the rounds (with replacement, a fixed seed so the same
numbers always give the same interval) shows how far the median could move
on another run of the same length: an interval that spans 1.00 means the
run cannot tell the two targets apart.
"""

import random
import statistics
import sys

RESAMPLES = 4000


def paired_interval(a: list[float], b: list[float], resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    if len(a) != len(b) or not a:
        raise ValueError(f"need two lists of the same non-zero length, got {len(a)} and {len(b)} rounds")
    ratios = [x / y for x, y in zip(a, b)]
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    low = medians[int(0.025 * resamples)]
    high = medians[int(0.975 * resamples) - 1]
    return statistics.median(ratios), low, high


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("ge", "le"):
        sys.exit(__doc__.splitlines()[2])
    direction = sys.argv[1]
    first, second = ([float(v) for v in arg.split()] for arg in sys.argv[2:])
    median, low, high = paired_interval(first, second)
    ratios = [x / y for x, y in zip(first, second)]
    wins = sum(r >= 1 if direction == "ge" else r <= 1 for r in ratios)
    print(f"{median:.3f} {wins} {len(ratios)} {low:.3f} {high:.3f}")
