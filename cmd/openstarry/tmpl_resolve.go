package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
)

// templateResolver builds the resolver of the design.* settings for a data
// directory: a remote design layer (with its cache under the data
// directory), else the local template directory (default DATA/templates),
// else the shipped templates.
func templateResolver(d config.Design, dataDir string, log zerolog.Logger) (*design.Resolver, error) {
	v := templateValidator()
	var fetcher *design.Fetcher
	if d.URL != "" {
		var keys []ed25519.PublicKey
		for _, k := range d.TrustedKeys {
			key, err := design.ParseTrustedKey(k)
			if err != nil {
				return nil, fmt.Errorf("trusted key %q: %w", k, err)
			}
			keys = append(keys, key)
		}
		retries := d.Retries
		if retries == 0 {
			retries = -1
		}
		var err error
		fetcher, err = design.NewFetcher(design.Options{
			URL: d.URL, CacheDir: filepath.Join(dataDir, "templates-cache"), Timeout: d.Timeout,
			Retries: retries, TrustedKeys: keys, AllowUnsignedCommands: d.AllowUnsignedCommands, Validator: v, Logger: log,
		})
		if err != nil {
			return nil, err
		}
	}
	dir := d.Templates
	if dir == "" {
		dir = filepath.Join(dataDir, "templates")
	}
	return design.NewResolver(design.ResolverOptions{Fetcher: fetcher, Dir: dir, Embedded: design.Shipped(), Validator: v}), nil
}

// resolveTemplate finds and validates the blueprint an agent starts with.
func resolveTemplate(ctx context.Context, d config.Design, nameOrFile, dataDir string, log zerolog.Logger) (*design.Resolved, error) {
	r, err := templateResolver(d, dataDir, log)
	if err != nil {
		return nil, err
	}
	res, err := r.Resolve(ctx, nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", nameOrFile, err)
	}
	return res, nil
}
