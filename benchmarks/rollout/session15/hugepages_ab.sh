#!/bin/bash
# Session 15: huge pages for torch's CPU tensors (THP_MEM_ALLOC_ENABLE=1; tagrpo does not set it)
# against none (=0) and glibc's own (GLIBC_TUNABLES=glibc.malloc.hugetlb=1), interleaved, on a quiet
# machine: the speed benchmark's tagrpo-grpo-noskip row and the decode step's products.
#   bash benchmarks/rollout/session15/hugepages_ab.sh /tmp/hp
cd "$(dirname "$0")/../../.."
O=${1:-/tmp/hp}; mkdir -p "$O"
B=".venv/bin/python benchmarks/speed_vs_trl/bench.py --steps 5 --warmup 2 --only tagrpo-grpo-noskip"
for i in 1 2; do
  for v in off torch glibc; do
    case $v in
      off) E="THP_MEM_ALLOC_ENABLE=0" ;;
      torch) E="THP_MEM_ALLOC_ENABLE=1" ;;
      glibc) E="THP_MEM_ALLOC_ENABLE=0 GLIBC_TUNABLES=glibc.malloc.hugetlb=1" ;;
    esac
    echo "== $v round $i: $(date +%T)"
    env $E .venv/bin/python benchmarks/rollout/product_rates.py 2>&1 | grep "total products"
    env $E $B --out "$O/$v$i" > "$O/$v$i.log" 2>&1
    grep "^| tagrpo-grpo-noskip" "$O/$v$i/results.md" | head -1
    python3 -c "import json; print('peak RSS MB', round(json.load(open('$O/$v$i/raw-tagrpo-grpo-noskip.json'))['peak_rss_mb']))"
  done
done
echo "done $(date +%T)"
