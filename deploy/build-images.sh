#!/usr/bin/env bash
# Build e31's container images, offline: one per service, one for the e31
# CLI (setup, audit, submit), one for nats-server and one for Prometheus,
# each FROM scratch with a static binary and nothing else (the run node also
# gets busybox, for the shells jobs run; Prometheus its configuration). Nothing is pulled: the Go module cache, the local Docker
# engine and a static busybox (Debian's busybox-static) are all it needs.
#
#   deploy/build-images.sh [IMAGE...]     default: every image
#
# Images are tagged e31-<name>:$E31_TAG (default "latest"): e31-nats,
# e31-cli, e31-submit, e31-rent, e31-run, e31-output, e31-release,
# e31-ledger, e31-prometheus (built by deploy/build-prometheus.sh, once per
# version: the first build takes minutes). Binaries and build contexts go to $E31_BUILD_DIR (default
# deploy/.build). With E31_NO_DOCKER=1 only the contexts are made.
set -euo pipefail

deploy="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$deploy")"
tag="${E31_TAG:-latest}"
out="${E31_BUILD_DIR:-$deploy/.build}"
services=(submit rent run output release ledger)
all=(nats cli "${services[@]}" prometheus)
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${all[@]}")

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}"
# Each module builds on its own (GOWORK=off), as it would in its own
# repository: the images prove that the go.mod replace lines are complete.
gobuild() { # module-dir output package
	(cd "$root/$1" && GOWORK=off go build -trimpath -ldflags='-s -w' -o "$2" "$3")
}

# context NAME: an empty build context with a root file system.
context() {
	rm -rf "$out/$1"
	mkdir -p "$out/$1/rootfs/usr/bin" "$out/$1/rootfs/tmp"
	chmod 1777 "$out/$1/rootfs/tmp"
}

# dockerfile NAME USER ENTRYPOINT...: the image runs ENTRYPOINT as USER.
dockerfile() {
	local name=$1 user=$2
	shift 2
	local entry
	entry=$(printf '"%s", ' "$@")
	cat >"$out/$name/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin:/bin
USER $user
ENTRYPOINT [${entry%, }]
EOF
}

build() {
	local name=$1 bin
	context "$name"
	bin="$out/$name/rootfs/usr/bin"
	case "$name" in
	nats)
		# nats-server v2.15.3, the version pkg/go.mod requires, built from
		# the module cache into a static binary.
		gobuild pkg "$bin/nats-server" github.com/nats-io/nats-server/v2
		mkdir -p "$out/$name/rootfs/etc/nats" "$out/$name/rootfs/data"
		# The configuration, not the secrets: the certificate, its key and
		# e31-auth.conf (deploy/init.sh) are mounted at /etc/nats/secrets,
		# and the server refuses to start without them.
		cp "$deploy"/nats/*.conf "$out/$name/rootfs/etc/nats/"
		# The store is a volume; root owns it in a fresh volume, so the
		# server runs as root inside its own container.
		dockerfile "$name" 0:0 /usr/bin/nats-server -c /etc/nats/cluster.conf
		;;
	cli)
		gobuild cmd/e31 "$bin/e31" .
		dockerfile "$name" 65534:65534 /usr/bin/e31
		;;
	run)
		gobuild services/run "$bin/e31-run" ./cmd/e31-run
		busybox=$(command -v busybox || true)
		if [ -z "$busybox" ] || ! { ldd "$busybox" 2>&1 || true; } | grep -q 'not a dynamic executable'; then
			echo "build-images: the run node needs a static busybox for the shells jobs run (apt-get install busybox-static)" >&2
			exit 1
		fi
		mkdir -p "$out/$name/rootfs/bin" "$out/$name/rootfs/var/lib/e31"
		cp "$busybox" "$out/$name/rootfs/bin/busybox"
		for applet in $("$busybox" --list); do
			[ "$applet" = busybox ] || ln -s busybox "$out/$name/rootfs/bin/$applet"
		done
		# The sandbox needs root (namespaces, cgroups, mounts); jobs run
		# as an unprivileged user it picks.
		dockerfile "$name" 0:0 /usr/bin/e31-run --work-dir /var/lib/e31
		;;
	prometheus)
		# Prometheus and its configuration (deploy/prometheus); the bearer
		# token it scrapes e31 with is mounted at /etc/prometheus/secrets.
		prom=$("$deploy/build-prometheus.sh")
		cp "$prom/prometheus" "$bin/prometheus"
		mkdir -p "$out/$name/rootfs/etc/prometheus" "$out/$name/store"
		cp "$deploy/prometheus/prometheus.yml" "$deploy/prometheus/rules.yml" "$out/$name/rootfs/etc/prometheus/"
		# Its store is a volume: a fresh volume takes the owner of the
		# image's /prometheus, which COPY --chown makes nobody's, so it
		# runs as nobody.
		cat >"$out/$name/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=65534:65534 store/ /prometheus/
USER 65534:65534
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]
EOF
		;;
	submit | rent | output | release | ledger)
		gobuild "services/$name" "$bin/e31-$name" "./cmd/e31-$name"
		# Stateless: everything they keep is in NATS, so they run as nobody.
		dockerfile "$name" 65534:65534 "/usr/bin/e31-$name"
		;;
	*)
		echo "build-images: unknown image $name (expected one of: ${all[*]})" >&2
		exit 2
		;;
	esac
	if [ "${E31_NO_DOCKER:-}" != 1 ]; then
		# The engine's legacy builder is enough for COPY into scratch; its
		# notice that it is deprecated is noise unless the build fails.
		if ! log=$(docker build -q -t "e31-$name:$tag" "$out/$name" 2>&1); then
			echo "$log" >&2
			exit 1
		fi
		echo "e31-$name:$tag  $(du -sh "$out/$name/rootfs" | cut -f1)"
	fi
}

for name in "${wanted[@]}"; do
	build "$name"
done
