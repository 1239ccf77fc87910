#!/bin/sh
# Submit one job per seed (a sweep of small simulations) and print their ids.
# Usage: examples/sweep/submit.sh [E31] [SEEDS...]
set -eu
e31=${1:-e31}
shift 2>/dev/null || true
dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for seed in ${*:-1 2 3 4 5}; do
	sed "s/SEED: \"1\"/SEED: \"$seed\"/" "$dir/job.yaml" > "$tmp/job-$seed.yaml"
	"$e31" submit --quiet "$tmp/job-$seed.yaml"
done
