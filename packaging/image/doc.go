// Package image holds the arm64 SD-card image that `make image` builds
// (image.sh, rootfs.sh, and files/, what the image adds to Debian: first
// boot, the data partition's growth, the network), and its tests: the
// first-boot script run here on a copy of a boot partition (make test),
// and the image booted under qemu-system-aarch64 with a power cut
// (make image-test, OPENSTARRY_IMAGE_TEST=1).
package image
