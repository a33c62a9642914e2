package sqlitedb

import "testing"

// FuzzWALDamage: WALDamage never panics, whatever the log holds.
func FuzzWALDamage(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 32))
	f.Add(append([]byte{0x37, 0x7f, 0x06, 0x82, 0, 0x2d, 0xe2, 0x18, 0, 0, 2, 0}, make([]byte, 600)...))
	f.Fuzz(func(t *testing.T, b []byte) { _ = WALDamage(b) })
}
