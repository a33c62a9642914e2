package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/openstarry/openstarry-edge/core/config"
)

// keyFlags are the flags a command takes from config.Keys: name, type,
// default, environment variable and help all come from the table. A value
// starts as the key's default, overlaid with its environment variable; the
// command line sets it (flag > env > default).
type keyFlags struct {
	cfg    *config.Config
	envErr error // the first bad environment value, reported when the command runs
}

// bindKeys adds the flags of the keys under sections ("mqtt") or named
// ("data").
func bindKeys(fl *pflag.FlagSet, sections ...string) *keyFlags {
	kf := &keyFlags{cfg: config.Default()}
	for _, k := range config.FlagKeys(sections...) {
		if v, ok := os.LookupEnv(k.Env); ok && v != "" {
			if err := kf.cfg.Var(k).Set(v); err != nil && kf.envErr == nil {
				kf.envErr = fmt.Errorf("environment %s (--%s): %w", k.Env, k.Flag, err)
			}
		}
		// A fresh Var: a list's first --flag replaces what the
		// environment gave.
		f := fl.VarPF(kf.cfg.Var(k), k.Flag, "", k.Doc+" (env "+k.Env+")")
		if k.Type() == "bool" {
			f.NoOptDefVal = "true"
		}
	}
	return kf
}

// config returns the configuration the environment and the flags gave.
func (kf *keyFlags) config() (*config.Config, error) {
	if kf.envErr != nil {
		return nil, kf.envErr
	}
	return kf.cfg, nil
}

// bindKeyString adds the flag of one string key, bound to p, with help
// instead of the key's documentation when it is not empty.
func bindKeyString(fl *pflag.FlagSet, p *string, name, help string) {
	k, ok := config.Lookup(name)
	if !ok || k.Flag == "" || k.Type() != "string" {
		panic("bindKeyString: " + name + " is not a string key with a flag")
	}
	if help == "" {
		help = k.Doc
	}
	fl.StringVar(p, k.Flag, envOr(k.Env, k.Default), help+" (env "+k.Env+")")
}
