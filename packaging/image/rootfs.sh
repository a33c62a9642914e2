#!/usr/bin/env bash
# Builds the image's base root file system, a tarball of Debian arm64 with
# a kernel, systemd and the Raspberry Pi firmware, from Debian's own
# packages with mmdebstrap (arm64 code runs through qemu-user-static's
# binfmt registration). The tarball is cached by its package list: the
# image step (image.sh) adds the openstarry .deb and the image's own files.
#   packaging/image/rootfs.sh OUT.tar
# Environment: SUITE (bookworm), MIRROR (http://deb.debian.org/debian),
# SECURITY (http://deb.debian.org/debian-security; empty: none).
set -euo pipefail
out=${1:?usage: rootfs.sh OUT.tar}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY=${SECURITY-http://deb.debian.org/debian-security}
comps="main non-free-firmware"

# What the device runs: a kernel and its initramfs, systemd (networkd
# brings the network up by DHCP, resolved its DNS, timesyncd sets the clock of boards without
# a battery-backed one), the Raspberry Pi boot firmware (it
# copies the kernel, initramfs and device trees to /boot/firmware), what
# first boot uses to grow the data partition, CA roots for an https hub.
# Nothing here listens on the network.
pkgs=(
  linux-image-arm64 initramfs-tools raspi-firmware
  systemd systemd-sysv systemd-timesyncd systemd-resolved udev dbus kmod
  e2fsprogs fdisk dosfstools
  ca-certificates iproute2 netbase
)
include=$(IFS=,; echo "${pkgs[*]}")

mirrors=("deb $MIRROR $SUITE $comps" "deb $MIRROR $SUITE-updates $comps")
[ -z "$SECURITY" ] || mirrors+=("deb $SECURITY $SUITE-security $comps")

# raspi-firmware's kernel hook writes /boot/firmware/config.txt and
# cmdline.txt from /etc/default/raspi-firmware: written after the install
# (a file there before would stop dpkg at its conffile prompt), then the
# hook run again. The root is found by its label, on a Pi as under qemu;
# the serial console of a Pi 3 or 4 is ttyS1; CMA=0 leaves cma= out of
# cmdline.txt (64M, the package's default, stops a Pi 4 from booting: the
# hook only leaves it out when it runs on a Pi 4), so one image boots both.
hook_raspi='printf "ROOTPART=LABEL=OSROOT\nCONSOLES=\"ttyS1,115200 tty0\"\nCMA=0\n" > "$1/etc/default/raspi-firmware" && chroot "$1" env DEB_MAINT_PARAMS=configure /etc/kernel/postinst.d/z50-raspi-firmware'
# DNS from DHCP through systemd-resolved, without its listeners: no stub
# on 127.0.0.53, no LLMNR, no mDNS; /etc/resolv.conf names the servers.
hook_dns='mkdir -p "$1/etc/systemd/resolved.conf.d" && printf "[Resolve]\nDNSStubListener=no\nLLMNR=no\nMulticastDNS=no\n" > "$1/etc/systemd/resolved.conf.d/openstarry.conf" && ln -sf /run/systemd/resolve/resolv.conf "$1/etc/resolv.conf"'

nice -n 19 mmdebstrap --architectures=arm64 --variant=apt \
  --include="$include" \
  --components="${comps// /,}" \
  --essential-hook='mkdir -p "$1/boot/firmware"' \
  --customize-hook="$hook_raspi" --customize-hook="$hook_dns" \
  --customize-hook='rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; : > "$1/etc/machine-id"' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$SUITE" "$out" "${mirrors[@]}"
