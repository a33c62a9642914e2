#!/usr/bin/env bash
# Builds the arm64 SD-card image, $DIST/openstarry-VERSION-arm64.img.xz,
# from Debian's own packages and our .deb, without mounting anything:
#   1. the base root file system (rootfs.sh: mmdebstrap, cached by its
#      package list in $CACHE);
#   2. our .deb installed into it (chroot + dpkg: arm64 code runs through
#      qemu-user-static's binfmt registration), then the image's own files
#      (files/: first boot, the data partition's growth, the network);
#   3. three file systems made from directories (mkfs.vfat + mcopy,
#      mkfs.ext4 -d) and put into a partition table written by sfdisk:
#        1 OSBOOT  FAT32, 256 MiB: the Raspberry Pi firmware, kernel and
#                  initramfs, and openstarry.yaml for a person to edit
#        2 OSROOT  ext4: Debian
#        3 OSDATA  ext4: /var/lib/openstarry, grown to fill the card at
#                  first boot
#   4. xz, and the image's SHA256 in the signed SHA256SUMS when
#      RELEASE_KEY is set (as `make release` signs).
# It runs as root (the files keep their owners), as `make image` does.
#
# Environment (all optional):
#   DIST       output directory (dist)
#   CACHE      work and cache directory (~/.cache/openstarry/image)
#   DEB        the arm64 openstarry .deb (default: built with build.sh)
#   BASE       a base tarball of rootfs.sh to use (default: the cached one)
#   SUITE      Debian suite (bookworm)
#   RELEASE_KEY  ed25519 key to sign $DIST's SHA256SUMS with
#   VERSION    the image's version (git describe)
set -euo pipefail
cd "$(dirname "$0")/../.."
here=packaging/image

DIST=${DIST:-dist}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/openstarry/image}
SUITE=${SUITE:-bookworm}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export SUITE VERSION
BOOT_MIB=256
DATA_MIB=64

[ "$(id -u)" = 0 ] || { echo "image.sh runs as root: the root file system's files keep their owners" >&2; exit 1; }
for t in mmdebstrap mkfs.ext4 mkfs.vfat mcopy sfdisk xz; do
  command -v $t >/dev/null || { echo "$t is missing: run packaging/image/deps.sh (make image installs it)" >&2; exit 1; }
done
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || { echo "no binfmt registration for arm64: install qemu-user-static (packaging/image/deps.sh)" >&2; exit 1; }

mkdir -p "$CACHE" "$DIST"
start=$(date +%s)
step() { echo "image: $* ($(($(date +%s) - start))s)"; }

# 1. The base root file system, rebuilt when rootfs.sh changes.
key=$(cat "$here/rootfs.sh" | sha256sum | cut -c1-12)
base=${BASE:-$CACHE/rootfs-$SUITE-$key.tar}
if [ ! -f "$base" ]; then
  step "building the base root file system with mmdebstrap (10-30 minutes under emulation)"
  # mmdebstrap picks the output's format by its name: .tar
  rm -f "$CACHE/building-$key.tar"
  "$here/rootfs.sh" "$CACHE/building-$key.tar"
  mv "$CACHE/building-$key.tar" "$base"
fi

# 2. Our .deb.
deb=${DEB:-}
if [ -z "$deb" ]; then
  step "building the arm64 .deb"
  rm -rf "$CACHE/dist"
  DIST="$CACHE/dist" TARGETS=linux/arm64 SMALL_TARGETS= DEB_ARCHS=arm64 ./build.sh matrix
  DIST="$CACHE/dist" TARGETS=linux/arm64 SMALL_TARGETS= DEB_ARCHS=arm64 ./build.sh debs
  deb=$(ls "$CACHE"/dist/openstarry_*_arm64.deb)
fi

work="$CACHE/work"
rm -rf "$work"
mkdir -p "$work/root"
root="$work/root"
step "unpacking the base"
tar -xf "$base" -C "$root"

step "installing $(basename "$deb")"
cp "$deb" "$root/tmp/openstarry.deb"
# The maintainer scripts need /proc (systemd-tmpfiles): mounted in a mount
# namespace of its own, gone with it.
unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && chroot "$1" dpkg -i /tmp/openstarry.deb' sh "$root"
rm -f "$root/tmp/openstarry.deb"

step "installing the image's files"
cp -a "$here/files/." "$root/"
chmod 0755 "$root/usr/lib/openstarry/firstboot" "$root/usr/lib/openstarry/growdata"
echo openstarry >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# Units: networkd (DHCP on the wired interface), first boot, the data
# partition's growth. Enabled by their symlinks: nothing runs in the chroot.
wants="$root/etc/systemd/system/multi-user.target.wants"
mkdir -p "$wants" "$root/etc/systemd/system/var-lib-openstarry.mount.wants" "$root/etc/systemd/system/sockets.target.wants" "$root/etc/systemd/system/network-online.target.wants"
ln -sf /lib/systemd/system/systemd-networkd.service "$wants/systemd-networkd.service"
ln -sf /lib/systemd/system/systemd-networkd.socket "$root/etc/systemd/system/sockets.target.wants/systemd-networkd.socket"
ln -sf /lib/systemd/system/systemd-networkd-wait-online.service "$root/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service"
ln -sf /etc/systemd/system/openstarry-firstboot.service "$wants/openstarry-firstboot.service"
ln -sf /etc/systemd/system/openstarry-growdata.service "$root/etc/systemd/system/var-lib-openstarry.mount.wants/openstarry-growdata.service"
# No password: nobody logs in on the console or the network; the device
# is reached through the hub (docs/install.md).
chroot "$root" passwd -l root >/dev/null
test -L "$wants/openstarry.service" || { echo "the .deb did not enable openstarry.service" >&2; exit 1; }

# 3. The partitions' contents.
step "splitting boot, root and data"
mkdir -p "$work/boot" "$work/data"
cp -a "$root/boot/firmware/." "$work/boot/"
rm -rf "${root:?}/boot/firmware/"*
# raspi-firmware's kernel and initramfs hooks copy them there (vmlinuz-*,
# initrd.img-*), beside config.txt, which names them, cmdline.txt and the
# device trees.
for f in config.txt cmdline.txt 'vmlinuz-*' 'initrd.img-*' 'bcm2711-rpi-4-b.dtb' 'bcm2837-rpi-3-b.dtb'; do
  ls "$work/boot/"$f >/dev/null 2>&1 || { echo "raspi-firmware put no $f on the boot partition:" >&2; ls "$work/boot" >&2; exit 1; }
done
# The configuration a person edits: the package's, with the data
# directory of the service.
cp "$root/etc/openstarry/openstarry.yaml" "$work/boot/openstarry.yaml"
cp "$here/boot-README.txt" "$work/boot/openstarry-README.txt"
uid=$(awk -F: '$1=="openstarry"{print $3}' "$root/etc/passwd")
gid=$(awk -F: '$1=="openstarry"{print $4}' "$root/etc/passwd")
[ -n "$uid" ] || { echo "no openstarry user in the image" >&2; exit 1; }
chown "$uid:$gid" "$work/data"
chmod 0750 "$work/data"
mkdir -p "$root/var/lib/openstarry"

mib() { du -s --block-size=1M "$1" | cut -f1; }
root_mib=$(( $(mib "$root") * 5 / 4 + 128 ))
step "making the file systems (root ${root_mib} MiB)"
rm -f "$work"/*.fs
mkfs.vfat -F 32 -n OSBOOT -i 05bd0075 -C "$work/boot.fs" $((BOOT_MIB * 1024)) >/dev/null
mcopy -s -p -m -i "$work/boot.fs" "$work/boot/"* ::
# mke2fs -d copies owners and modes; the journal and a few reserved
# blocks only (a root of fixed size, written rarely).
mkfs.ext4 -q -L OSROOT -U 0a5f0e11-0000-4000-8000-000000000002 -m 1 -d "$root" "$work/root.fs" "${root_mib}M"
mkfs.ext4 -q -L OSDATA -U 0a5f0e11-0000-4000-8000-000000000003 -m 0 -d "$work/data" "$work/data.fs" "${DATA_MIB}M"

img="$work/openstarry-$VERSION-arm64.img"
s=2048 # 1 MiB alignment, in 512-byte sectors
b=$((BOOT_MIB * 2048)) r=$((root_mib * 2048)) d=$((DATA_MIB * 2048))
truncate -s $(((s + b + r + d) * 512)) "$img"
sfdisk -q "$img" <<EOF
label: dos
label-id: 0x05bd0075
unit: sectors
start=$s, size=$b, type=c, bootable
start=$((s + b)), size=$r, type=83
start=$((s + b + r)), size=$d, type=83
EOF
dd if="$work/boot.fs" of="$img" bs=1M seek=$((s / 2048)) conv=notrunc,sparse status=none
dd if="$work/root.fs" of="$img" bs=1M seek=$(((s + b) / 2048)) conv=notrunc,sparse status=none
dd if="$work/data.fs" of="$img" bs=1M seek=$(((s + b + r) / 2048)) conv=notrunc,sparse status=none
rm -f "$work"/*.fs

step "compressing"
out="$DIST/$(basename "$img").xz"
nice -n 19 xz -T2 -6 -c "$img" >"$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$root" "$work/boot" "$work/data"
raw=$(stat -c %s "$img")
rm -f "$img"
if [ -n "${RELEASE_KEY:-}" ]; then
  go build -o "$CACHE/openstarry-host" ./cmd/openstarry
  "$CACHE/openstarry-host" sign-release --key "$RELEASE_KEY" "$DIST"
fi
step "built $out: $(stat -c %s "$out") bytes compressed, $raw bytes on the card before it grows"
