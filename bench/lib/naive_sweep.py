"""The naive sweep: every failure set of F shards against every tenant, one loop each.

    shuffle-shard place ... < ids | python3 naive_sweep.py --n N --failures F

Reads `place` JSON lines (placement is done once, outside the timing), keeps
each tenant's shards as a bitmask, and for every set of F failed shards
counts the tenants whose mask lies inside the set (fully down) and those
that meet it (degraded). Prints one JSON object: sets, elapsed_s, cpu_s and
the worst and mean of both counts, for checking against `blast --sweep F`.
"""

import argparse
import itertools
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--failures", type=int, required=True)
    args = parser.parse_args()
    masks = []
    for line in sys.stdin:
        mask = 0
        for shard in json.loads(line)["shards"]:
            mask |= 1 << int(shard)
        masks.append(mask)
    cpu, start = time.process_time_ns(), time.perf_counter_ns()
    worst_down = worst_hit = sum_down = sum_hit = sets = 0
    for failed in itertools.combinations(range(args.n), args.failures):
        f = 0
        for shard in failed:
            f |= 1 << shard
        down = hit = 0
        for mask in masks:
            if mask & f:
                hit += 1
                if mask & ~f == 0:
                    down += 1
        worst_down, worst_hit = max(worst_down, down), max(worst_hit, hit)
        sum_down, sum_hit, sets = sum_down + down, sum_hit + hit, sets + 1
    elapsed, cpu = time.perf_counter_ns() - start, time.process_time_ns() - cpu
    tenants = max(len(masks), 1)
    json.dump({
        "tenants": len(masks), "sets": sets, "elapsed_s": elapsed / 1e9, "cpu_s": cpu / 1e9,
        "fully_down": {"worst": worst_down / tenants, "mean": sum_down / sets / tenants},
        "degraded": {"worst": worst_hit / tenants, "mean": sum_hit / sets / tenants},
    }, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
