#!/usr/bin/env bash
# A same-machine A/B of fp8moe-bench builds or settings (docs/perf-notes.md: only comparisons made
# in one call on one H200 count; machines differ by a few percent). Every case runs with every
# arm, the arms alternating within each round (in reverse order every other round), live
# schedule only; then a summary per case and arm: the live span medians of the rounds and, for
# pipeline cases, when each kernel ended.
#
#   ARMS="base=.carry/base/fp8moe-bench new=build-gpu/bench/fp8moe-bench" \
#   CASES="deepseek-v3-ep8:512:16 qwen3-30b-a3b:4096:4096 act-only" \
#   ROUNDS=2 SAMPLES=40 OUT=/tmp/ab PACK_TO=/path/ab.tgz scripts/ab.sh
#
# An arm is NAME=BINARY, or NAME=BINARY@VAR=VALUE,VAR=VALUE for one binary under knobs
# (src/knobs/knobs.hpp). A case is PRESET:CAPACITY:TOKENS, or act-only (fp8moe-bench --act-only:
# live and padded, alone and after a predecessor). EXTRA adds options to every run (e.g.
# "--flush clean"). The JSON of every run stays in OUT; PACK_TO packs OUT into one tarball.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
ARMS=${ARMS:?ARMS="name=binary[@VAR=value,...] ..."}
CASES=${CASES:?CASES="preset:capacity:tokens ... | act-only"}
ROUNDS=${ROUNDS:-2}
SAMPLES=${SAMPLES:-40}
OUT=${OUT:-./ab-out}
mkdir -p "$OUT"

run_arm() {  # run_arm SPEC CASE JSON
  local spec=$1 case=$2 json=$3 binary knobs=()
  binary=${spec#*=}
  if [[ $binary == *@* ]]; then
    IFS=, read -ra knobs <<<"${binary#*@}"
    binary=${binary%%@*}
  fi
  if [[ $case == act-only ]]; then
    env "${knobs[@]}" "$binary" --act-only --json "$json" ${EXTRA:-}
  else
    IFS=: read -r preset capacity tokens <<<"$case"
    env "${knobs[@]}" "$binary" --preset "$preset" --capacity "$capacity" --tokens "$tokens" --schedule live \
      --quick --samples "$SAMPLES" --json "$json" ${EXTRA:-}
  fi
}

read -ra arm_list <<<"$ARMS"
for ((round = 1; round <= ROUNDS; round++)); do
  order=("${arm_list[@]}")
  if ((round % 2 == 0)); then  # ABBA: even rounds run the arms in reverse, so a drift (the GPU warming) cancels
    order=()
    for ((i = ${#arm_list[@]} - 1; i >= 0; i--)); do order+=("${arm_list[i]}"); done
  fi
  for case in $CASES; do
    for spec in "${order[@]}"; do
      name=${spec%%=*}
      echo "=== round $round, $case, $name" >&2
      run_arm "$spec" "$case" "$OUT/${case//:/-}.$name.r$round.json" >>"$OUT/ab.log" 2>&1 ||
        echo "    failed (see $OUT/ab.log)" >&2
    done
  done
done

python3 - "$OUT" "$ROUNDS" "$CASES" "$ARMS" <<'PY' | tee "$OUT/summary.txt"
import json, os, sys
out, rounds, cases, arms = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), [a.split("=")[0] for a in sys.argv[4].split()]
def load(case, arm, r):
    try:
        return json.load(open(os.path.join(out, "%s.%s.r%d.json" % (case.replace(":", "-"), arm, r))))
    except (OSError, ValueError):
        return None
for case in cases:
    print("## " + case)
    if case == "act-only":
        runs = {arm: [load(case, arm, r) for r in range(1, rounds + 1)] for arm in arms}
        first = next((d for rs in runs.values() for d in rs if d), {})
        for i, shape in enumerate(first.get("shapes", [])):
            print("  " + shape["shape"])
            for arm in arms:
                alone = [("%.1f" % d["shapes"][i]["live"]["median_us"]) if d else "-" for d in runs[arm]]
                after = [("%.1f" % d["shapes"][i]["after_predecessor"]["live"]["median_us"]) if d else "-" for d in runs[arm]]
                print("    %-8s live alone %s us, after a predecessor %s" % (arm, " / ".join(alone), " / ".join(after)))
        continue
    for arm in arms:
        runs = [load(case, arm, r) for r in range(1, rounds + 1)]
        spans = ["%.1f" % d["cases"][0]["live"]["median_us"] if d else "-" for d in runs]
        line = "  %-8s span %s us" % (arm, " / ".join(spans))
        d = next((d for d in runs if d), None)
        if d:
            c = d["cases"][0]
            ends = {k: c["kernels_start_us"][k] + c["kernels_us"][k] for k in (c.get("kernels_us") or {}) if k in (c.get("kernels_start_us") or {})}
            line += "; round 1 kernel ends: " + ", ".join("%s %.1f" % (k, v) for k, v in sorted(ends.items(), key=lambda kv: kv[1]))
        print(line)
PY
if [[ -n ${PACK_TO:-} ]]; then tar -czf "$PACK_TO" -C "$OUT" . && echo "packed $OUT into $PACK_TO"; fi
