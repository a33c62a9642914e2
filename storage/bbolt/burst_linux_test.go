//go:build linux

package bbolt

import "testing"

// BenchmarkSaveBurst is one Save of a burst (burst, 150 tasks a Save). Its
// allocs/op and B/op are the store's own work; ns/op includes the fold's
// fsyncs; bytes/save is what the Save handed to write(2): the pages of
// the fold.
func BenchmarkSaveBurst(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	step := burst("burst", 150)
	for range 10 { // the file grown
		if err := s.Save(ctx, step()); err != nil {
			b.Fatal(err)
		}
	}
	var written int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		snap := step()
		w0 := wchar(b)
		b.StartTimer()
		if err := s.Save(ctx, snap); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		written += wchar(b) - w0
		b.StartTimer()
	}
	b.ReportMetric(float64(written)/float64(b.N), "bytes/save")
}
