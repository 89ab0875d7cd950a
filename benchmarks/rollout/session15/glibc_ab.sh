#!/bin/bash
# Session 15: the speed benchmark's tagrpo-grpo-noskip row without and with glibc's huge pages, interleaved x2 (quiet machine)
cd "$(dirname "$0")/../../.."
B=".venv/bin/python benchmarks/speed_vs_trl/bench.py --steps 5 --warmup 2 --only tagrpo-grpo-noskip"
O=${1:-/tmp/thp_ab}; mkdir -p $O
for i in 1 2; do
  $B --out $O/default$i > $O/default$i.log 2>&1
  GLIBC_TUNABLES=glibc.malloc.hugetlb=1 $B --out $O/thp$i > $O/thp$i.log 2>&1
done
echo done
