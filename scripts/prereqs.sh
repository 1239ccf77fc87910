#!/bin/sh
# scripts/prereqs.sh demo|test: check that this machine has what `make demo`
# or `make test` needs beyond Go and Docker. As root on Debian or Ubuntu it
# installs what is missing with apt-get; otherwise it says exactly what to
# install and exits 1. `make demo`, `make test` and .ci/run all call it, so
# the list lives here once.
#
# What each package is for:
#   btrfs-progs     mkfs.btrfs: a sandbox node keeps jobs' /out and /tmp in a
#                   btrfs file system with quotas. Without it they fall back
#                   to a tmpfs, whose pages count against the job's memory.
#   busybox-static  a static busybox: the run node's image (deploy/) has it
#                   for the shells jobs run, and e2e/image_test.go uses it.
#   chromium        the operator's page is tested in a real browser.
#   curl, jq        deploy/README.md's commands, which the cluster test runs.
#   iproute2        ip: the document tests run e31 dev in a network of their own.
#   make, git       the Makefile (run this script alone where make is missing:
#                   sudo scripts/prereqs.sh demo); `make lint` lists the files with git.
set -eu

what=${1:-}
case "$what" in
demo | test) ;;
*)
	echo "usage: $0 demo|test" >&2
	exit 2
	;;
esac

missing=""    # Debian packages to install
problems=""   # what no package of ours fixes, one line each
need() {      # need PACKAGE: add it to the list to install
	case " $missing " in *" $1 "*) ;; *) missing="${missing:+$missing }$1" ;; esac
}
problem() {
	problems="${problems}  - $1
"
}
have() { command -v "$1" >/dev/null 2>&1; }
# An sbin tool is found there even when PATH (a user's) does not list sbin.
have_sbin() { have "$1" || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

root=no
[ "$(id -u)" -eq 0 ] && root=yes

if have go; then
	:
elif [ -x /usr/local/go/bin/go ]; then
	# Installed from go.dev, but not on this PATH: sudo resets it.
	problem "/usr/local/go/bin on PATH (sudo resets PATH: sudo env PATH=\"\$PATH\" make $what)"
else
	problem "Go 1.26 or newer: https://go.dev/dl/ (Debian's golang package is older)"
fi
have make || need make
have_sbin mkfs.btrfs || need btrfs-progs

if [ "$what" = demo ] && [ "$root" = no ]; then
	problem "root: e31 dev runs every job in the sandbox (its own namespaces, cgroup and disk quota), which needs root: sudo make demo"
fi

if [ "$what" = test ]; then
	have git || need git
	# The run node's image needs busybox without shared libraries.
	if ! have busybox || ! { ldd "$(command -v busybox)" 2>&1 || true; } | grep -q 'not a dynamic executable'; then
		need busybox-static
	fi
	have curl || need curl
	have jq || need jq
	have ip || need iproute2
	have chromium || have chromium-browser || have google-chrome || need chromium
	if ! have docker; then
		problem "Docker: the end-to-end tests run e31 in containers (https://docs.docker.com/engine/install/debian/)"
	elif ! docker info >/dev/null 2>&1; then
		problem "a running Docker engine this user may use: 'docker info' fails (start it, or add yourself to the docker group)"
	fi
fi

if [ -n "$missing" ]; then
	if [ "$root" = yes ] && have apt-get; then
		echo "prereqs: installing $missing"
		log=$(mktemp)
		# shellcheck disable=SC2086 # one word per package
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; } >"$log" 2>&1; then
			cat "$log" >&2
			rm -f "$log"
			echo "prereqs: apt-get install $missing failed (above)" >&2
			exit 1
		fi
		rm -f "$log"
		missing=""
	elif have apt-get; then
		problem "these Debian packages: sudo apt-get install $missing"
	else
		problem "what these Debian packages give (named so on Debian and Ubuntu): $missing"
	fi
fi

if [ -n "$problems" ]; then
	echo "make $what needs, and this machine lacks:" >&2
	printf '%s' "$problems" >&2
	case " $missing " in *" btrfs-progs "*)
		echo "(without btrfs-progs a job's /out and /tmp become a tmpfs, charged to the job's memory)" >&2
		;;
	esac
	exit 1
fi
