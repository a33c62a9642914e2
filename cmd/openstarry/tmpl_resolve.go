package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openstarry/openstarry-edge/configs"
	"github.com/openstarry/openstarry-edge/core/design"
)

// resolvedTemplate is a blueprint and the variables an agent records about it.
type resolvedTemplate struct {
	Template *design.Template
	Vars     map[string]any
}

// resolveTemplate finds a template by file path, in DATA/templates, or among
// the shipped ones.
func resolveTemplate(_ context.Context, nameOrFile, dataDir string) (*resolvedTemplate, error) {
	var (
		raw    []byte
		err    error
		source string
	)
	switch {
	case strings.HasSuffix(nameOrFile, ".json") || strings.ContainsRune(nameOrFile, os.PathSeparator):
		raw, err = os.ReadFile(nameOrFile)
		source = "file"
	default:
		raw, err = os.ReadFile(filepath.Join(dataDir, "templates", nameOrFile+".json"))
		source = "local"
		if os.IsNotExist(err) {
			raw, err = configs.Templates.ReadFile("templates/" + nameOrFile + ".json")
			source = "embedded"
		}
	}
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", nameOrFile, err)
	}
	t, err := design.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", nameOrFile, err)
	}
	return &resolvedTemplate{Template: t, Vars: map[string]any{
		"template_name": t.Name, "template_version": t.Version,
		"template_digest": design.Digest(raw), "template_source": source,
	}}, nil
}
