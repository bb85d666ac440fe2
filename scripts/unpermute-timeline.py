#!/usr/bin/env python3
"""Summarise the unpermutation's per-CTA timelines of a -DFP8MOE_UNPERMUTE_TRACE=1 build.

fp8moe-bench appends, with FP8MOE_UNPERMUTE_TRACE_OUT=PATH, one line per CTA and replay:
  preset capacity tokens pdl replay cta sm entry waited end      (ns of %globaltimer)
Usage: scripts/unpermute-timeline.py TRACE [TRACE ...]

Per (file, case), medians over the replays, in microseconds from the replay's release: the first
CTA past its wait (under PDL that is GEMM2's completion; launched plainly, the first CTA's entry,
after GEMM2's completion). For each: when the first and the median CTA started working, the
CTAs' working time (end - max(waited, entry)) at p10/p50/p90/max and its mean over each SM's CTAs
(the fastest and slowest SM), when the p50/p90/last CTA
ended, how many CTAs an SM held, and the working time of CTAs that started in the first/last
tenth of the start order.
"""
import collections
import statistics
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def main(paths):
    for path in paths:
        # One replay's records are consecutive lines with ascending cta (several bench runs may
        # append to one file with the same replay numbers).
        cases = collections.defaultdict(list)  # (preset, cap, tokens, pdl) -> [rows of a replay]
        prev = None
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 10:
                    continue
                key = (parts[0], int(parts[1]), int(parts[2]), parts[3], int(parts[4]))
                row = tuple(map(int, parts[5:]))  # cta, sm, entry, waited, end
                if prev is None or key != prev[0] or row[0] <= prev[1]:
                    cases[key[:4]].append([])
                cases[key[:4]][-1].append(row)
                prev = (key, row[0])
        for case, replays in sorted(cases.items()):
            agg = collections.defaultdict(list)
            for rows in replays:
                start = [max(w, e) for _, _, e, w, _ in rows]
                t0 = min(start)
                work = [end - s for (_, _, _, _, end), s in zip(rows, start)]
                ends = [end - t0 for *_, end in rows]
                per_sm = collections.Counter(sm for _, sm, *_ in rows)
                sm_work = collections.defaultdict(list)
                for (_, sm, *_), w in zip(rows, work):
                    sm_work[sm].append(w)
                sm_mean = [statistics.mean(v) for v in sm_work.values()]
                order = sorted(range(len(rows)), key=lambda i: start[i])
                tenth = max(1, len(rows) // 10)
                agg["ctas"].append(len(rows))
                agg["sms"].append(len(per_sm))
                agg["max/sm"].append(max(per_sm.values()))
                agg["start p50"].append(pct([s - t0 for s in start], 0.5))
                agg["start max"].append(max(s - t0 for s in start))
                for q in (0.1, 0.5, 0.9):
                    agg[f"work p{int(q * 100)}"].append(pct(work, q))
                agg["work max"].append(max(work))
                agg["SM mean min"].append(min(sm_mean))
                agg["SM mean max"].append(max(sm_mean))
                agg["end p50"].append(pct(ends, 0.5))
                agg["end p90"].append(pct(ends, 0.9))
                agg["end max"].append(max(ends))
                agg["work first 10%"].append(statistics.median(work[i] for i in order[:tenth]))
                agg["work last 10%"].append(statistics.median(work[i] for i in order[-tenth:]))
            preset, cap, tokens, pdl = case
            print(f"{path}: {preset} {cap}/{tokens} pdl={pdl} ({len(replays)} replays)")
            print("  " + ", ".join(
                f"{k} {statistics.median(v) / (1 if k in ('ctas', 'sms', 'max/sm') else 1e3):.1f}"
                for k, v in agg.items()))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
