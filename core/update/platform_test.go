package update

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"testing"
)

// TestBuildSettings reads this test binary's build settings and compares
// them with what debug/buildinfo reads.
func TestBuildSettings(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := buildSettings(exe)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, s := range bi.Settings {
		want[s.Key] = s.Value
	}
	if len(got) != len(want) {
		t.Errorf("%d settings, debug/buildinfo reads %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, debug/buildinfo reads %q", k, got[k], v)
		}
	}
}

// TestBuildSettingsDamaged: a block cut short, a magic without a block, a
// header of Go before 1.18 and no magic at all are refused, never read.
func TestBuildSettingsDamaged(t *testing.T) {
	magic := buildInfoMagic()
	block := func(flags byte, body []byte) []byte {
		b := make([]byte, 48) // 16 bytes before the aligned header
		h := make([]byte, buildInfoHeaderSize)
		copy(h, magic)
		h[14], h[15] = 8, flags
		return append(append(b, h...), body...)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"no magic", bytes.Repeat([]byte("x"), 100<<10)},
		{"magic only", append(make([]byte, 16), magic...)},
		{"before Go 1.18", block(0, nil)},
		{"cut short", block(buildInfoInline, []byte{0x20, 'g', 'o'})},
		{"huge length", block(buildInfoInline, []byte{0xff, 0xff, 0xff, 0xff, 0x7f})},
		{"no GOOS", block(buildInfoInline, []byte("\x06go1.26\x00"))},
	} {
		if s, err := settingsFrom(bytes.NewReader(tc.data)); err == nil {
			t.Errorf("%s: read %v", tc.name, s)
		}
	}
	mod := "0123456789abcdefpath\tx\nbuild\tGOOS=linux\nbuild\tGOARCH=arm\nbuild\tGOARM=6\n0123456789abcdef"
	body := append([]byte("\x06go1.26"), byte(len(mod)))
	body = append(body, mod...)
	s, err := settingsFrom(bytes.NewReader(block(buildInfoInline, body)))
	if err != nil || s["GOOS"] != "linux" || s["GOARCH"] != "arm" || s["GOARM"] != "6" {
		t.Fatalf("a made block: %v %v", s, err)
	}
}

func FuzzBuildSettings(f *testing.F) {
	magic := buildInfoMagic()
	h := make([]byte, buildInfoHeaderSize)
	copy(h, magic)
	h[14], h[15] = 8, buildInfoInline
	f.Add(append(h, "\x06go1.26\x1abuild\tGOOS=a\nbuild\tGOARCH=b\n"...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := settingsFrom(bytes.NewReader(data))
		if err == nil && (s["GOOS"] == "" || s["GOARCH"] == "") {
			t.Fatalf("accepted without a platform: %v", s)
		}
	})
}
