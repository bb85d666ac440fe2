#!/usr/bin/env python3
"""Prints the k-loops of the grouped GEMM's kernels as ptxas scheduled them, so that a change to the
kernel can be judged on its SASS before any GPU time (perf notes v30-v31: code added anywhere in the
kernel, even never executed, moved its k-loops by 2-9%).

    # cuobjdump (and the nvdisasm it runs) are not part of this machine's CUDA; NVIDIA publishes both on PyPI:
    pip download --no-deps nvidia-cuda-cuobjdump -d /tmp/whl && python3 -m zipfile -e /tmp/whl/*.whl /tmp/cuobjdump
    pip download --no-deps nvidia-cuda-nvdisasm -d /tmp/whl2 && python3 -m zipfile -e /tmp/whl2/*.whl /tmp/nvdisasm
    export FP8MOE_CUOBJDUMP=$(find /tmp/cuobjdump -name cuobjdump -type f) && chmod +x $FP8MOE_CUOBJDUMP
    N=$(find /tmp/nvdisasm -name nvdisasm -type f) && chmod +x $N && export PATH=$(dirname $N):$PATH
    nvcc -std=c++17 -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -Xcompiler=-ffp-contract=off -lineinfo \\
         -Isrc -Iinclude -cubin -o /tmp/gemm.cubin src/gemm/sm90_fp8_grouped_gemm_1d2d.cu   # ~10 s
    scripts/gemm-sass.py /tmp/gemm.cubin                 # every GEMM kernel: its loop regions
    scripts/gemm-sass.py /tmp/gemm.cubin --kernel auto --full > after.txt   # one kernel, normalised text
    scripts/gemm-sass.py build-gpu/bench/fp8moe-bench --kernel auto         # a linked binary works too

A region is a run of QGMMA instructions less than 400 instructions apart: each tile shape's k-loop
with its tile change. For each it prints the instruction count, where the QGMMA sit (back to back
is what the tuned loops look like) and the instruction kinds that grow when ptxas gives up on the
uniform datapath (R2UR) or adds work to the loop. --full prints the region's instructions with
registers and constants normalised, for a diff against another build.
"""
import argparse
import os
import re
import subprocess
import sys


def kernels(cuobjdump, binary):
    """{mangled name: [(address, instruction)]} for the GEMM kernels, from one SASS dump (a kernel
    that appears in several of the binary's cubins is taken once)."""
    run = subprocess.run([cuobjdump, '-sass', binary], capture_output=True, text=True)
    if run.returncode != 0:  # e.g. no nvdisasm on PATH: say what cuobjdump said
        sys.exit(f'{cuobjdump} -sass {binary} failed:\n{run.stderr.strip()}')
    out = run.stdout
    found, name = {}, None
    for line in out.splitlines():
        f = re.search(r'Function : (\S+)', line)
        if f:
            name = f.group(1) if 'grouped_gemm' in f.group(1) and f.group(1) not in found else None
            if name:
                found[name] = []
            continue
        m = re.match(r'\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', line)
        if name and m:
            found[name].append((int(m.group(1), 16), m.group(2)))
    return found


def normalise(s):
    s = re.sub(r'0x[0-9a-f]+', 'K', s)
    s = re.sub(r'\bU?R\d+\b', 'R', s)
    s = re.sub(r'\bU?P\d\b', 'P', s)
    return re.sub(r'\s+', ' ', s).strip()


def regions(ins):
    at = [i for i, (_, s) in enumerate(ins) if 'GMMA' in s]
    out = []
    for i in at:
        if out and i - out[-1][1] < 400:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('binary', help='a cubin or a linked binary holding the GEMM kernels')
    ap.add_argument('--kernel', default='', help='only kernels whose mangled name contains this')
    ap.add_argument('--full', action='store_true', help='print each region, normalised')
    a = ap.parse_args()
    cuobjdump = os.environ.get('FP8MOE_CUOBJDUMP', 'cuobjdump')
    for name, ins in sorted(kernels(cuobjdump, a.binary).items()):
        if a.kernel not in name:
            continue
        print(f'{name}: {len(ins)} instructions')
        for lo, hi in regions(ins):
            body = [normalise(s) for _, s in ins[lo:hi + 1]]
            shape = re.search(r'GMMA\.(\S+?)\.', body[0]).group(1)
            at = [k for k, s in enumerate(body) if 'GMMA' in s]
            ops = [s.split(' ')[1] if s.startswith('@') else s.split(' ')[0] for s in body]  # (after a predicate)
            kinds = {k: sum(op.startswith(k) for op in ops) for k in ('R2UR', 'FFMA', 'LDG', 'LDS', 'IMAD', 'BRA')}
            print(f'  {ins[lo][0]:#07x}-{ins[hi][0]:#07x} {shape}: {len(body)} instructions, QGMMA at {at}')
            print('    ' + ', '.join(f'{k} {v}' for k, v in kinds.items()))
            if a.full:
                print('\n'.join('    ' + s for s in body))
    return 0


if __name__ == '__main__':
    sys.exit(main())
