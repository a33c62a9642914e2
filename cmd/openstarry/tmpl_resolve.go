package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/openstarry/openstarry-edge/core/design"
)

// designFlags say where blueprints come from: a remote design layer (with
// its cache under the data directory), else DATA/templates, else the shipped
// templates.
type designFlags struct {
	url         string
	timeout     time.Duration
	retries     int
	trustedKeys []string
	templates   string
}

func (f *designFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.url, "design-url", envOr("OPENSTARRY_DESIGN_URL", ""), "design layer root URL; empty uses local templates (env OPENSTARRY_DESIGN_URL)")
	fl.DurationVar(&f.timeout, "design-timeout", envDuration("OPENSTARRY_DESIGN_TIMEOUT", 5*time.Second), "timeout of one design layer request (env OPENSTARRY_DESIGN_TIMEOUT)")
	fl.IntVar(&f.retries, "design-retries", envInt("OPENSTARRY_DESIGN_RETRIES", 3), "retries of a failed design layer request (env OPENSTARRY_DESIGN_RETRIES)")
	fl.StringSliceVar(&f.trustedKeys, "trusted-key", envList("OPENSTARRY_DESIGN_TRUSTED_KEYS"), "ed25519 public key (base64 or .pub file) whose signature templates from the design layer must carry; repeatable (env OPENSTARRY_DESIGN_TRUSTED_KEYS, comma-separated)")
	fl.StringVar(&f.templates, "templates", envOr("OPENSTARRY_TEMPLATES", ""), "local template directory; default DATA/templates (env OPENSTARRY_TEMPLATES)")
}

// resolver builds the template resolver for a data directory.
func (f *designFlags) resolver(dataDir string) (*design.Resolver, error) {
	log := logger()
	v := templateValidator()
	var fetcher *design.Fetcher
	if f.url != "" {
		var keys []ed25519.PublicKey
		for _, k := range f.trustedKeys {
			key, err := design.ParseTrustedKey(k)
			if err != nil {
				return nil, fmt.Errorf("trusted key %q: %w", k, err)
			}
			keys = append(keys, key)
		}
		retries := f.retries
		if retries == 0 {
			retries = -1
		}
		var err error
		fetcher, err = design.NewFetcher(design.Options{
			URL: f.url, CacheDir: filepath.Join(dataDir, "templates-cache"), Timeout: f.timeout,
			Retries: retries, TrustedKeys: keys, Validator: v, Logger: log,
		})
		if err != nil {
			return nil, err
		}
	}
	dir := f.templates
	if dir == "" {
		dir = filepath.Join(dataDir, "templates")
	}
	return design.NewResolver(design.ResolverOptions{Fetcher: fetcher, Dir: dir, Embedded: design.Shipped(), Validator: v}), nil
}

// resolveTemplate finds and validates the blueprint an agent starts with.
func (f *designFlags) resolveTemplate(ctx context.Context, nameOrFile, dataDir string) (*design.Resolved, error) {
	r, err := f.resolver(dataDir)
	if err != nil {
		return nil, err
	}
	res, err := r.Resolve(ctx, nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", nameOrFile, err)
	}
	return res, nil
}
