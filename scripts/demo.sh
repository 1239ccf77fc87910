#!/bin/sh
# make demo: start e31 dev in a temporary directory, run every example,
# print outcomes and hold records, check the ledger with an audit, stop.
set -eu
e31=${E31:-bin/e31}
state=$(mktemp -d "${TMPDIR:-/tmp}/e31-demo.XXXXXX")
log="$state/dev.log"
cleanup() {
	if [ -n "${dev:-}" ]; then kill -INT "$dev" 2>/dev/null && wait "$dev" 2>/dev/null || true; fi
	rm -rf "$state"
}
trap cleanup EXIT INT TERM

"$e31" dev --dir "$state/e31" --listen 127.0.0.1:0 --nodes 2 --grace 2s --log-level warn --users demo >"$log" 2>&1 &
dev=$!
i=0
until url=$(sed -n 's/^e31 dev: NATS JetStream listening on \([^ ]*\).*/\1/p' "$log") && [ -n "$url" ]; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$dev" 2>/dev/null; then
		echo "e31 dev did not start:" >&2; cat "$log" >&2; exit 1
	fi
	sleep 0.1
done
export E31_NATS="$url"
# Authentication is on: submit as the submitter "demo", audit as the auditor.
export E31_CREDS="$state/e31/creds/demo.creds"
grep '^e31 dev' "$log"
if grep -q 'NO DISK QUOTA' "$log"; then
	echo "WARNING: the nodes could not make their btrfs job disk (btrfs-progs, loop devices):" >&2
	echo "         jobs' /out and /tmp are a tmpfs, charged to each job's memory." >&2
fi
echo

echo "== submitting the examples"
ids=""
for ex in hello wordcount training fails too-long; do
	id=$("$e31" submit --quiet "examples/$ex/job.yaml")
	printf '%-10s %s\n' "$ex" "$id"
	ids="$ids $id"
done
for id in $(examples/sweep/submit.sh "$e31" 1 2 3 4 5); do
	printf '%-10s %s\n' "sweep" "$id"
	ids="$ids $id"
done
echo

for id in $ids; do
	echo "== e31 wait $id"
	"$e31" wait --timeout 2m "$id" || true
	echo
done

echo "== e31 ledger"
"$e31" ledger
echo
wc=$(echo $ids | cut -d' ' -f2)
echo "== e31 output $wc (wordcount)"
"$e31" output "$wc" -o "$state/wordcount-out"
cat "$state/wordcount-out/counts.txt"
echo
echo "== e31 audit (as the auditor)"
E31_CREDS="$state/e31/creds/auditor.creds" "$e31" audit
