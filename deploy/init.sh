#!/usr/bin/env bash
# Make the secrets of a deployed e31, once, offline: the keys of the E31,
# TENANTS (submitters') and NODES (run nodes') accounts, the TLS authority and the servers'
# certificate, and one credentials file per identity compose.yaml runs.
# Everything goes into deploy/secrets (or $E31_SECRETS), which git ignores:
#
#   keys/            the account keys and the TLS authority's key: everything
#                    rests on them. Never mounted; keep them off the servers
#                    (and backed up) once the deployment runs.
#   nats/            for the NATS servers: server.pem, server-key.pem, ca.pem,
#                    e31-auth.conf (mounted at /etc/nats/secrets)
#   ca.pem           the TLS authority, for every client (E31_TLS_CA)
#   operator/        e31.creds + ca.pem: the setup step, and the operator's CLI
#   auditor/         the auditor's (reads the whole log, changes nothing)
#   submit/ rent/ output/ release/ ledger/
#                    one identity per service, shared by its instances
#   node-1/ ...      one identity per run node: its name is the node's id,
#                    with its signing key (node.key) and its card (node.card:
#                    its name, key and size, signed with keys/cards.key)
#   rent/, auditor/  also cards.pub, the card key's public half: RENT holds
#                    each node to its card, the audit checks every card
#   users/NAME.creds a submitter's, for each NAME given
#   metrics.token    the bearer token of every process's /metrics, /healthz
#                    and /readyz (bound beyond loopback in containers); a
#                    copy in each identity's directory, and in prometheus/
#   auditor/         also what the audit service (compose.yaml) runs as
#
#   deploy/init.sh [SUBMITTER...]
#
# E31_NODES (default 3) run nodes, E31_TLS_HOSTS the names and addresses in
# the servers' certificate (default nats-1,nats-2,nats-3,localhost,127.0.0.1:
# add the names clients outside use), E31_BIN an e31 binary (default: built
# from this checkout). Running it again keeps the keys and the authority and
# signs every file anew; credentials issued before stay valid until revoked.
set -euo pipefail

deploy="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$deploy")"
out="${E31_SECRETS:-$deploy/secrets}"
nodes="${E31_NODES:-3}"
hosts="${E31_TLS_HOSTS:-nats-1,nats-2,nats-3,localhost,127.0.0.1}"
# The uid the service images run as (build-images.sh: USER 65534).
nobody=65534

e31="${E31_BIN:-}"
if [ -z "$e31" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	(cd "$root" && go build -o "$tmp/e31" ./cmd/e31)
	e31="$tmp/e31"
fi

umask 077
mkdir -p "$out"
chmod 700 "$out"
keys="$out/keys"

"$e31" creds init --dir "$keys" --resolver-dir /data/jwt
"$e31" creds tls --dir "$keys" --hosts "$hosts" -o "$out/nats"
cp "$keys/e31-auth.conf" "$out/nats/e31-auth.conf"
cp "$out/nats/ca.pem" "$out/ca.pem"
chmod 644 "$out/ca.pem"

# The operator's endpoints' token: made once, kept when run again (a
# deployment's Prometheus keeps working).
if [ ! -s "$out/metrics.token" ]; then
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$out/metrics.token"
	echo >>"$out/metrics.token"
fi
mkdir -p "$out/prometheus"
cp "$out/metrics.token" "$out/prometheus/metrics.token"

# identity DIR ROLE NAME [SERVICE]: DIR/e31.creds, DIR/ca.pem and
# DIR/metrics.token, what one container mounts at /etc/e31.
identity() {
	local dir="$out/$1"
	mkdir -p "$dir"
	"$e31" creds user --dir "$keys" --role "$2" --name "$3" ${4:+--service "$4"} -o "$dir/e31.creds"
	cp "$out/ca.pem" "$dir/ca.pem"
	cp "$out/metrics.token" "$dir/metrics.token"
}
identity operator operator operator
identity auditor auditor auditor
for s in submit rent output release ledger; do
	identity "$s" service "$s" "$s"
done
# Each node: a user of the NODES account, which speaks only for itself and
# reaches the data of the jobs held on it through the node gate; its
# signing key and its card, for the size compose.yaml gives it
# (E31_NODE_CPU, _MEMORY, _DISK).
for i in $(seq 1 "$nodes"); do
	dir="$out/node-$i"
	"$e31" creds node --dir "$keys" --name "node-$i" --cpu "${E31_NODE_CPU:-2}" --memory "${E31_NODE_MEMORY:-2GiB}" \
		--disk "${E31_NODE_DISK:-10GiB}" --isolation sandbox -o "$dir"
	cp "$out/ca.pem" "$dir/ca.pem"
	cp "$out/metrics.token" "$dir/metrics.token"
done
# The card key's public half, for RENT (--node-cards-key) and the audit
# (--cards-key): not secret.
cp "$keys/cards.pub" "$out/rent/cards.pub"
cp "$keys/cards.pub" "$out/auditor/cards.pub"
mkdir -p "$out/users"
for u in "$@"; do
	"$e31" creds user --dir "$keys" --role submitter --name "$u" -o "$out/users/$u.creds"
done

# The setup step, the audit, Prometheus and the stateless services run as
# an unprivileged user and must read their own files; the NATS servers and
# run nodes run as root. The secrets directory itself stays the owner's
# alone.
unprivileged=(operator auditor submit rent output release ledger prometheus)
if [ "$(id -u)" = 0 ]; then
	for d in "${unprivileged[@]}"; do
		chown -R "$nobody:$nobody" "$out/$d"
	done
else
	# Without root the files cannot be handed to uid 65534: make them
	# readable by anyone, which on this host means anyone who may enter
	# $out (mode 0700: its owner).
	for d in "${unprivileged[@]}"; do
		chmod -R a+rX "$out/$d"
	done
fi

cat <<EOF
secrets in $out; next:
  docker-compose -f $deploy/compose.yaml up -d
  export E31_NATS=nats://localhost:4222 E31_TLS_CA=$out/ca.pem E31_CREDS=$out/operator/e31.creds
Move $keys off this machine once the deployment runs: whoever holds it can
become anyone.
EOF
