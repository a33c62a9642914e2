package wiring

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
)

// TestResolveTemplate: an agent's blueprint comes from the data
// directory's templates before the shipped ones; an unknown name and a bad
// trusted key are errors that name them.
func TestResolveTemplate(t *testing.T) {
	ctx, log := context.Background(), zerolog.Nop()
	data := t.TempDir()
	r, err := ResolveTemplate(ctx, config.Design{}, "echo", data, log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != design.SourceEmbedded || r.Template.Name != "echo" {
		t.Errorf("echo: source %q name %q, want the shipped template", r.Source, r.Template.Name)
	}

	local, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "configs", "templates", "echo.json"))
	if err != nil {
		t.Fatal(err)
	}
	local = []byte(strings.Replace(string(local), `"version": "1.0.0"`, `"version": "1.0.1"`, 1))
	if err := os.MkdirAll(filepath.Join(data, "templates"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "templates", "echo.json"), local, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = ResolveTemplate(ctx, config.Design{}, "echo", data, log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Source != design.SourceLocal || r.Version != "1.0.1" {
		t.Errorf("echo with DATA/templates/echo.json: source %q version %q, want local 1.0.1", r.Source, r.Version)
	}

	if _, err := ResolveTemplate(ctx, config.Design{}, "no-such-template", data, log); err == nil || !strings.HasPrefix(err.Error(), `template "no-such-template": `) {
		t.Errorf("unknown template: %v", err)
	}
	bad := config.Design{URL: "http://127.0.0.1:9/", TrustedKeys: []string{"not-a-key"}}
	if _, err := TemplateResolver(bad, data, log); err == nil || !strings.HasPrefix(err.Error(), `trusted key "not-a-key": `) {
		t.Errorf("bad trusted key: %v", err)
	}
}
