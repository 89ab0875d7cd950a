#!/bin/bash
# THP / mmap variants of the speed benchmark's tagrpo-grpo-noskip row, TRL beside (one quiet run)
cd "$(dirname "$0")/../../.."
B=".venv/bin/python benchmarks/speed_vs_trl/bench.py --steps 5 --warmup 2"
O=${1:-/tmp/thp_out}; mkdir -p $O
date
$B --only trl-grpo,tagrpo-grpo-noskip --out $O/default > $O/default.log 2>&1
date
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 $B --only tagrpo-grpo-noskip --out $O/thp_keep > $O/thp_keep.log 2>&1
date
GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=1048576 $B --only tagrpo-grpo-noskip --tagrpo-set keep_freed_memory=false --out $O/thp_mmap1m > $O/thp_mmap1m.log 2>&1
date
GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1048576 $B --only tagrpo-grpo-noskip --tagrpo-set keep_freed_memory=false --out $O/mmap1m > $O/mmap1m.log 2>&1
date
$B --only tagrpo-grpo-noskip --out $O/default2 > $O/default2.log 2>&1
date

for i in 1 2; do
  echo "== product_rates default $i"; .venv/bin/python benchmarks/rollout/product_rates.py 2>&1 | tail -12
  echo "== product_rates hugetlb $i"; GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python benchmarks/rollout/product_rates.py 2>&1 | tail -12
  echo "== generate_breakdown default $i"; .venv/bin/python benchmarks/rollout/generate_breakdown.py 2>&1 | tail -6
  echo "== generate_breakdown hugetlb $i"; GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python benchmarks/rollout/generate_breakdown.py 2>&1 | tail -6
done
date
echo done
