#!/usr/bin/env python3
"""Summarises the per-CTA timelines of a timeline build of the grouped GEMM (where the tail goes).

    cmake -S . -B build-tr -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
          -DFP8MOE_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DFP8MOE_GEMM_TRACE=1
    cmake --build build-tr --target fp8moe-gemm-bench
    build-tr/bench/fp8moe-gemm-bench --no-ceilings --schedule live --case 512/16 --trace trace.txt
    scripts/gemm-timeline.py trace.txt

The trace holds lines "case gemm cta slot ns": slot 0 is the CTA's entry, slots 1..n the start of
its tiles, slot n+1 the exit of its tile loop (math thread 0 of each CTA).

Per GEMM it prints the span (first entry to last exit), the spread of CTA exits, the utilisation
(mean CTA exit / span: the share of SM-time inside the tile loop), tiles per CTA, tile durations,
and the tail: the time from the first CTA running out of tiles to the last one finishing.
"""
import sys
from collections import defaultdict
from statistics import median


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(path):
    runs = defaultdict(lambda: defaultdict(dict))
    for line in open(path):
        case, gemm, cta, slot, ns = line.split()
        runs[(case, int(gemm))][int(cta)][int(slot)] = int(ns)
    for (case, gemm), ctas in runs.items():
        t0 = min(v[0] for v in ctas.values())
        ends, counts, tiles = [], [], []  # tiles: (start, duration, index in its CTA)
        for v in ctas.values():
            last = max(v)
            ends.append(v[last] - t0)
            counts.append(last - 1)
            tiles += [(v[i] - t0, v[i + 1] - v[i], i) for i in range(1, last)]
        span, first_done = max(ends), min(ends)
        util = sum(ends) / (len(ends) * span)
        later = [d for _, d, i in tiles if i > 1]
        in_tail = [d for s, d, _ in tiles if s >= first_done]
        before = [d for s, d, i in tiles if s + d <= first_done and i > 1]
        print(f"{case} gemm{gemm}: {len(ctas)} CTAs, span {span / 1e3:.1f} us, CTA exits "
              f"{first_done / 1e3:.1f}..{median(ends) / 1e3:.1f}..{span / 1e3:.1f} us (min..median..max), "
              f"utilisation {util:.3f}")
        print(f"  tiles per CTA {min(counts)}..{max(counts)}; first tile {median([d for _, d, i in tiles if i == 1]) / 1e3:.1f} us, "
              + (f"later tiles {median(later) / 1e3:.1f} us (p10 {pct(later, 0.1) / 1e3:.1f}, p90 {pct(later, 0.9) / 1e3:.1f})"
                 if later else "no later tiles"))
        if in_tail:
            print(f"  tail {(span - first_done) / 1e3:.1f} us: {len(in_tail)} tiles start after the first CTA is done, "
                  f"median {median(in_tail) / 1e3:.1f} us each"
                  + (f" (before: {median(before) / 1e3:.1f} us)" if before else ""))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
