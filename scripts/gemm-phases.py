#!/usr/bin/env python3
"""Summarises the phase timelines of the grouped GEMM's TRACE=2..5 builds (where a tile's time goes).

    cmake -S . -B build-tr3 -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
          -DFP8MOE_BUILD_TESTS=OFF -DCMAKE_CUDA_FLAGS=-DFP8MOE_GEMM_TRACE=3
    cmake --build build-tr3 --target fp8moe-gemm-bench
    build-tr3/bench/fp8moe-gemm-bench --no-ceilings --schedule live --case 512/512 --trace trace.txt
    scripts/gemm-phases.py trace.txt            # TRACE=2 or 3: per-tile phases
    scripts/gemm-phases.py --kblocks trace.txt  # TRACE=4: the first k-blocks of one CTA
    scripts/gemm-phases.py --producer trace.txt # TRACE=5: the producer at tile changes
    scripts/gemm-phases.py --epilogue trace.txt # TRACE=6: the bulk-store epilogue's steps and tile change

The trace holds lines "case gemm cta slot ns" (src/gemm/sm90_fp8_grouped_gemm_1d2d.cuh):
  TRACE=2  math thread 0: slot 0 the CTA's entry, then six per tile (start, first k-block's data,
           first promotion done, last k-block released, last promotion done, epilogue end), then
           the tile loop's exit (traces made before 2026-11-30 evening have four per tile, without
           the two promotions: pass --stamps 4);
  TRACE=3  the same below slot 80, and from slot 80 the producer's request of each tile's first
           k-block;
  TRACE=4  math thread 0: pairs (ready to wait, data there) per stage below slot 80; the producer's
           request of each stage from slot 80.
  TRACE=6  as TRACE=2 with ten stamps per tile: after the last promotion, the staging tile free
           (bulk_wait_read), the first barrier, the tile staged (stmatrix), the second barrier,
           then the epilogue's end (the TMA stores issued); tiles that copy out hold 1 there.
Tiles of the column-split path (17..64 live rows in the 128-wide kernel) record no phases, so
shapes that have them (e.g. Qwen3-30B at 512/512) do not parse as TRACE=2/3.

Per GEMM it prints medians (p10, p90), microseconds, over all tiles of the run: the k-loop, the
epilogue, the wait from the epilogue's end to the next tile's first data, with six stamps also the
first k-block (data -> first promotion) against the tile's mean k-block and the last promotion,
and with TRACE=3 how long
before the previous tile's last release the producer requested a tile's first k-block (its lead; a
negative lead is a request after it) and how long that k-block took to arrive. --epilogue (TRACE=6
only: read without it, a TRACE=6 trace parses as six stamps per tile and gives meaningless
figures) prints a bulk-store tile start to start, its first k-block, each epilogue step and the
tile change after it, split at the next tile's start stamp (perf notes v43).
"""
import sys
from collections import defaultdict
from statistics import median

PRODUCER_SLOT0 = 80


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def fmt(values):
    if not values:
        return "-"
    return f"{median(values) / 1e3:.2f} ({pct(values, 0.1) / 1e3:.2f}, {pct(values, 0.9) / 1e3:.2f})"


def read(path):
    runs = defaultdict(lambda: defaultdict(dict))
    for line in open(path):
        case, gemm, cta, slot, ns = line.split()
        runs[(case, int(gemm))][int(cta)][int(slot)] = int(ns)
    return runs


def phases(path, n=6):
    for (case, gemm), ctas in read(path).items():
        loop, epilogue, gap, lead, latency, first, last = [], [], [], [], [], [], []
        for stamps in ctas.values():
            math = [stamps[s] for s in sorted(stamps) if s < PRODUCER_SLOT0]
            requests = [stamps[s] for s in sorted(stamps) if s >= PRODUCER_SLOT0]
            tiles = (len(math) - 2) // n
            if PRODUCER_SLOT0 in stamps and PRODUCER_SLOT0 + 1 not in stamps:
                requests = []  # TRACE=5: four producer stamps per tile (--producer), the first tile's 1-2 unset
            for i in range(tiles):
                tile = math[1 + n * i: 1 + n * (i + 1)]
                if n == 6:
                    start, data, promoted, released, loop_end, done = tile
                    first.append(promoted - data)
                    last.append(loop_end - released)
                else:
                    start, data, released, done = tile
                loop.append(released - data)
                epilogue.append(done - released)
                if i > 0:
                    gap.append(data - math[n * i])  # from the previous tile's epilogue end
                    if i < len(requests):
                        released = math[n * i - (2 if n == 6 else 1)]  # the previous tile's last release
                        lead.append(released - requests[i])
                        latency.append(data - requests[i])
        print(f"{case} gemm{gemm}: {len(loop)} tiles; k-loop {fmt(loop)}, epilogue {fmt(epilogue)}, "
              f"epilogue end -> next tile's data {fmt(gap)}")
        if first:
            print(f"  of which first k-block (data -> first promotion done) {fmt(first)}, "
                  f"last promotion {fmt(last)} (the epilogue above includes it)")
        if lead:
            print(f"  first k-block requested {fmt(lead)} before the previous tile's last release; "
                  f"request -> data {fmt(latency)}")


def producer(path):
    """TRACE=5: the producer's four stamps per tile (slots 80 + 4 * tile + i)."""
    for (case, gemm), ctas in read(path).items():
        get, slot, issue = [], [], []
        for stamps in ctas.values():
            for i in range(1, 12):
                s = {j: stamps.get(PRODUCER_SLOT0 + 4 * i + j) for j in range(4)}
                last_prev = stamps.get(PRODUCER_SLOT0 + 4 * (i - 1) + 3)
                if None in s.values() or last_prev is None:
                    continue
                get.append(s[0] - last_prev)
                slot.append(s[1] - s[0])
                issue.append(s[2] - s[1])
        print(f"{case} gemm{gemm} producer at tile changes: previous tile's last request -> next tile known "
              f"{fmt(get)}; -> its first stage free {fmt(slot)}; -> requested {fmt(issue)}")


def epilogue(path):
    """TRACE=6: a bulk-store tile's phases, its epilogue's steps, and the tile change after it."""
    names = ["tile, start to start", "start -> first data", "k-loop (data -> last released)",
             "  of which first k-block", "last promotion", "bulk_wait_read", "barrier 1",
             "staged (stmatrix)", "fence + barrier 2", "TMA stores issued", "end -> next tile's start",
             "end -> next tile's data"]
    for (case, gemm), ctas in read(path).items():
        steps, copied = defaultdict(list), 0
        for stamps in ctas.values():
            math = [stamps[s] for s in sorted(stamps) if s < PRODUCER_SLOT0]
            tiles = (len(math) - 2) // 10
            for i in range(tiles):
                start, data, promoted, released, loop_end, free, b1, staged, b2, done = math[1 + 10 * i: 11 + 10 * i]
                if free == 1:
                    copied += 1
                    continue
                for name, (a, b) in zip(names[1:10], [(start, data), (data, released), (data, promoted),
                                                      (released, loop_end), (loop_end, free), (free, b1),
                                                      (b1, staged), (staged, b2), (b2, done)]):
                    steps[name].append(b - a)
                if i + 1 < tiles:
                    next_start, next_data = math[1 + 10 * (i + 1)], math[1 + 10 * (i + 1) + 1]
                    steps[names[0]].append(next_start - start)
                    steps[names[-2]].append(next_start - done)
                    steps[names[-1]].append(next_data - done)
        print(f"{case} gemm{gemm}: {len(steps[names[1]])} bulk-store tiles ({copied} copied out, not counted)")
        for name in names:
            print(f"  {name:32s} {fmt(steps[name])}")


def kblocks(path, cta=5, count=40):
    for (case, gemm), ctas in read(path).items():
        stamps = ctas.get(cta)
        if not stamps:
            continue
        math = [stamps[s] for s in sorted(stamps) if s < PRODUCER_SLOT0]
        requests = [stamps[s] for s in sorted(stamps) if s >= PRODUCER_SLOT0]
        t0 = min(math + requests)
        print(f"{case} gemm{gemm}, CTA {cta} (us from its first stamp):")
        for j in range(min(len(math) // 2, len(requests), count)):
            ready, data, req = (math[2 * j] - t0) / 1e3, (math[2 * j + 1] - t0) / 1e3, (requests[j] - t0) / 1e3
            print(f"  stage {j:2d}: requested {req:7.2f}, math ready {ready:7.2f}, data {data:7.2f} "
                  f"(waited {data - ready:5.2f}, request -> data {data - req:5.2f})")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--kblocks":
        kblocks(sys.argv[2])
    elif len(sys.argv) == 2:
        phases(sys.argv[1])
    elif len(sys.argv) == 3 and sys.argv[1] == "--producer":
        producer(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "--epilogue":
        epilogue(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--stamps":
        phases(sys.argv[3], int(sys.argv[2]))
    else:
        sys.exit(__doc__)
