#!/bin/bash
# fresh-check.sh checks that sprof builds, records and passes `make test` on
# a fresh Debian 12 machine: it builds a clean bookworm root with
# debootstrap, copies Go and a clone of this repository's HEAD into it, and
# runs there, as root, the README's quick start (its pprof with -top: -http
# would wait for a browser) and `make test` with CI=true. A step that works here
# only because this machine has a package installed already fails there.
# The BPF tests run in the chroot: it shares the kernel, with /proc, /sys,
# /dev, the BPF file system, debugfs and tracefs bind-mounted.
#
# Run it by hand, as root, before resolving an issue that touches what the
# tests install or need; it is not part of CI (it downloads a Debian base
# system and the test packages, and takes tens of minutes on 2 cores).
#
# Usage: sudo scripts/fresh-check.sh [WORKDIR]
#   WORKDIR  where the root is built (default: a new directory in /var/tmp),
#            removed at the end unless KEEP=1.
#   MIRROR   the Debian mirror (default: this machine's, else deb.debian.org).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	echo "fresh-check: run as root (debootstrap, chroot and the BPF tests need it)" >&2
	exit 1
fi
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=${1:-$(mktemp -d /var/tmp/sprof-fresh.XXXXXX)}
root=$work/root
mirror=${MIRROR:-$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
goroot=$(go env GOROOT 2>/dev/null || echo /usr/local/go)

mounted=()
cleanup() {
	for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
		umount -l "${mounted[i]}" 2>/dev/null || true
	done
	if [ "${KEEP:-0}" != 1 ]; then
		rm -rf --one-file-system "$work"
	fi
}
trap cleanup EXIT

step() { printf '\nfresh-check: %s (%s)\n' "$*" "$(date -u +%T)"; }

command -v debootstrap >/dev/null || {
	step "installing debootstrap"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
}

step "debootstrap bookworm from $mirror into $root"
# git clones the project, make runs its tests, ca-certificates lets Go
# fetch modules over HTTPS: what the README's commands assume.
debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$root" "$mirror"
# Like an installed system: bookworm, its updates and security updates.
cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SOURCES
cp /etc/resolv.conf "$root/etc/resolv.conf"
# An installed system's /etc/hosts (debootstrap writes none): localhost
# resolves without DNS (pprof's web UI, the tests' servers) and sudo knows
# the host's name.
cat >"$root/etc/hosts" <<HOSTS
127.0.0.1	localhost
127.0.1.1	$(hostname)
::1	localhost ip6-localhost ip6-loopback
HOSTS
# The certificate authorities this machine adds, if any: a network that
# inspects TLS (a corporate proxy) signs with one, and Go's module
# downloads fail without it. A machine on that network has it too.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
	cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
	chroot "$root" update-ca-certificates >/dev/null
fi

step "copying Go ($goroot) and a clone of $repo at $(git -C "$repo" rev-parse --short HEAD)"
cp -a "$goroot" "$root/usr/local/go"
git clone -q "$repo" "$root/root/sprof"

# The root a mount point of its own, as a machine's / is: unshare
# --propagation (the mount-namespace tests) fails on a bare chroot directory.
mount --bind "$root" "$root"
mounted+=("$root")
for m in /proc /sys /dev /dev/pts /sys/fs/bpf /sys/kernel/debug /sys/kernel/tracing /sys/fs/cgroup; do
	[ -d "$m" ] || continue
	mkdir -p "$root$m"
	# --rbind: the mounts below it come along (a hybrid host has cgroup2 at
	# /sys/fs/cgroup/unified); rslave: unmounting them here leaves the host's.
	mount --rbind "$m" "$root$m"
	mount --make-rslave "$root$m"
	mounted+=("$root$m")
done

# The README's quick start, as it is written: its first code block after
# "## Quick start", but the clone (done above) and pprof's -http, which
# would wait for a browser.
quick=$(awk '/^## Quick start/ { q = 1 } q && /^```sh/ { c = 1; next } c && /^```/ { exit } c' "$repo/README.md" |
	grep -v '^git clone' | sed 's/go tool pprof -http :[0-9]*/go tool pprof -top/')
step "README quick start and make test in the chroot"
printf '%s\n' "$quick"
start=$(date +%s)
status=0
in_root() {
	chroot "$root" /usr/bin/env -i HOME=/root CI=true TERM=dumb \
		PATH=/usr/local/go/bin:/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		bash -c "cd /root/sprof && $1"
}
# As a user types it, without -e (its SUDO=$(command -v sudo) fails where
# sudo is not installed, on purpose); its last command, pprof, fails if
# any step before it did not leave a profile.
in_root "$quick" || status=$?
if [ "$status" -eq 0 ]; then
	step "make test"
	in_root "make test" || status=$?
fi
step "done in $(($(date +%s) - start)) s: exit status $status"
exit "$status"
