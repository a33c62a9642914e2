// Package release writes and checks the signed checksum list of a release:
// SHA256SUMS (one "<sha256 hex>  <file name>" line per file, the format of
// sha256sum) and SHA256SUMS.sig, its detached ed25519 signature in the form
// of a template's .sig file (design.Sign: "ed25519:<key id>:<base64>").
//
// The invariant: Verify succeeds only when the signature over the exact
// bytes of SHA256SUMS is good under a trusted key, and every file it lists
// is present with that digest. A file in the directory that the list does
// not name is reported, never silently trusted.
package release
