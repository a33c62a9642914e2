// Package packaging holds what ships beside the binary (the systemd unit,
// the .deb's configuration and maintainer scripts, the Windows notes) and
// the tests of the release that build.sh makes: static binaries under their
// size budgets, a signed SHA256SUMS, the ARM binaries and the daemon under
// qemu-user-static, the .deb installed, upgraded, removed and purged with
// dpkg, and the Windows binary under wine.
package packaging
