package sessionapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
)

// TestArtifactRoute: a reviewer opens an approval's artifacts through the
// API; text is served inline, anything else as a download, and no path
// leads out of the session's artifacts/ (issue 29, item 5).
func TestArtifactRoute(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	m := openManager(t, data, &logbuf.Buffer{})
	v, err := m.CreateProject(ctx, plan(t, `{"name":"x","tasks":[{"phase":1,"type":"a"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m.StopDispatch()
	dir := m.Layout().Artifacts(v.ID, v.SessionID)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "sub", "notes.md"), []byte("# Notes\nこんにちは\n"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "image.bin"), []byte{0x89, 'P', 'N', 'G', 0, 1, 2}, 0o600))
	must(os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat("x", MaxInlineArtifact+1)), 0o600))
	secret := filepath.Join(data, "secret.txt")
	must(os.WriteFile(secret, []byte("do not serve"), 0o600))
	must(os.Symlink(secret, filepath.Join(dir, "link.txt")))
	must(os.Symlink(data, filepath.Join(dir, "up")))
	mux := http.NewServeMux()
	Routes(mux, m, zerolog.Nop())
	base := "/projects/" + v.ID + "/sessions/" + v.SessionID + "/artifacts/"
	for _, tc := range []struct {
		path, disposition, body string
		code                    int
	}{
		{"sub/notes.md", "inline", "こんにちは", 200},
		{"image.bin", "attachment", "PNG", 200},
		{"big.txt", "attachment", "xxx", 200},
		{"link.txt", "", "", 404},
		{"up/secret.txt", "", "", 404},
		{"../state_checkpoint.json", "", "", 400},
		{"sub/../../approaches.json", "", "", 400},
		{"nothing.txt", "", "", 404},
		{"sub", "", "", 404},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.Path = base + tc.path // as sent, not cleaned by a client
		mux.ServeHTTP(rec, req)
		if rec.Code == 301 || rec.Code == 307 {
			rec.Code = 400 // the mux refuses a path with .. by redirecting it
		}
		got := rec.Body.String()
		if rec.Code != tc.code || strings.Contains(got, "do not serve") ||
			tc.code == 200 && (!strings.HasPrefix(rec.Header().Get("Content-Disposition"), tc.disposition) || !strings.Contains(got, tc.body) ||
				rec.Header().Get("X-Content-Type-Options") != "nosniff") {
			t.Errorf("%s: %d %v %.80q", tc.path, rec.Code, rec.Header(), got)
		}
		if tc.disposition == "inline" && rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type %s", tc.path, rec.Header().Get("Content-Type"))
		}
	}
	// Another project's session is not found.
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/projects/proj_20240101_aaaaaa/sessions/"+v.SessionID+"/artifacts/sub/notes.md", nil))
	if rec.Code != 404 {
		t.Errorf("another project: %d", rec.Code)
	}
}
