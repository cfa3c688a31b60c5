#!/usr/bin/env bash
# Runs one of the README's two commands on a fresh Debian 12 system made by
# debootstrap, from a clean clone of this repository's HEAD: the check to run
# before resolving an issue that touches setup. Nothing of the host leaks in:
# no packages, no Python environment, no build directory, no CUDA toolkit
# (the build detects its absence). python3 on the fresh system's PATH is
# Debian's, without numpy or safetensors, so a test that reached for it
# instead of the project's venv fails here.
#
#   scripts/fresh-machine.sh [test|quickstart]     (default: test)
#
# Needs root (debootstrap, chroot, mounts). DTC_FRESH_ROOT names the folder
# of the fresh system (default /var/tmp/dtc-fresh); it is deleted first, and
# kept afterwards for inspection (the build is under src/dtc/build).
set -euo pipefail
cd "$(dirname "$0")/.."
command="${1:-test}"
case "$command" in
  test | quickstart) ;;
  *) echo "usage: scripts/fresh-machine.sh [test|quickstart]" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
  echo "error: scripts/fresh-machine.sh needs root (debootstrap, chroot)" >&2
  exit 2
fi
fresh="${DTC_FRESH_ROOT:-/var/tmp/dtc-fresh}"
mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources \
  2>/dev/null | head -1)"
mirror="${mirror:-http://deb.debian.org/debian}"

if ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

start=$(date +%s)
rm -rf "$fresh"
echo "fresh-machine: debootstrap bookworm into $fresh from $mirror"
debootstrap --variant=minbase bookworm "$fresh" "$mirror" >"$fresh.log" 2>&1 || {
  tail -20 "$fresh.log" >&2
  echo "error: debootstrap failed; its log is $fresh.log" >&2
  exit 1
}
# The host's package sources (its mirror may carry the LLVM 22 packages
# that setup.sh installs) and name resolution; nothing else of the host.
mkdir -p "$fresh/etc/apt/sources.list.d"
if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
  cp /etc/apt/sources.list.d/*.sources "$fresh/etc/apt/sources.list.d/"
  rm -f "$fresh/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$fresh/etc/resolv.conf"
# The machine's network trust, which every machine of the project's kind
# has (an egress proxy's CA, pip's config naming the bundle): without it pip
# cannot reach PyPI. It is the machine's, not a dependency of dtc's.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$fresh/usr/local/share/ca-certificates" "$fresh/etc/ssl/certs"
  cp -r /usr/local/share/ca-certificates/. "$fresh/usr/local/share/ca-certificates/"
  cp /etc/ssl/certs/ca-certificates.crt "$fresh/etc/ssl/certs/" 2>/dev/null || true
fi
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$fresh/etc/pip.conf"
# A clean clone of HEAD: only what is committed reaches the fresh system.
git clone -q --no-local "$(pwd)" "$fresh/src/dtc"
echo "fresh-machine: clone of $(git rev-parse --short HEAD) in $fresh/src/dtc"

# The mounts live in their own namespace and disappear with it.
set +e
unshare --mount --fork bash -euo pipefail -c '
  fresh="$1"; command="$2"
  mount -t proc proc "$fresh/proc"
  mount --rbind /sys "$fresh/sys"
  mount --rbind /dev "$fresh/dev"
  mount -t tmpfs -o size=4g tmpfs "$fresh/dev/shm"
  mount -t tmpfs -o size=8g tmpfs "$fresh/tmp"
  exec chroot "$fresh" /usr/bin/env -i HOME=/root TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /src/dtc && scripts/$command.sh"
' fresh-machine "$fresh" "$command" 2>&1 | tee "$fresh.run.log"
status=${PIPESTATUS[0]}
set -e
echo "fresh-machine: scripts/$command.sh exited $status after" \
  "$(( $(date +%s) - start )) s (log: $fresh.run.log)"
exit "$status"
