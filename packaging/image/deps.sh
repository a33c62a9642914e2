#!/bin/sh
# Installs what `make image` and `make image-test` need, from Debian's
# packages, and checks that arm64 programs run here (qemu-user-static's
# binfmt registration, with the F flag, so that they run in a chroot).
set -eu
pkgs="mmdebstrap qemu-user-static binfmt-support arch-test qemu-system-arm ipxe-qemu dosfstools mtools fdisk e2fsprogs xz-utils debian-archive-keyring mosquitto"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "image: installing$missing"
	[ "$(id -u)" = 0 ] || { echo "packaging/image/deps.sh: run as root to install$missing" >&2; exit 1; }
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -q --no-install-recommends $missing
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
	[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
	update-binfmts --enable qemu-aarch64 || true
fi
if ! arch-test arm64 >/dev/null 2>&1; then
	echo "packaging/image/deps.sh: arm64 programs do not run here (no binfmt registration for qemu-aarch64)" >&2
	exit 1
fi
