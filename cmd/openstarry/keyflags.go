package main

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"
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

// envAliases are environment variables a command read before its flag took
// its variable from the key table: each is still read, when the key's own
// variable is not set, and its use is logged as deprecated
// (warnDeprecatedEnv). docs/cli.md lists them.
var envAliases = []struct {
	old, key, flag string // the old variable, the key now naming it, the flag it sets
}{
	{"OPENSTARRY_API_TOKEN", "http.token", "token"}, // `openstarry run --token`: the same setting as the daemon's http.token
}

// bindKeyEnv adds the string flag called flag, bound to p, for the key
// called name whose flag is not the table's (http.token is the daemon's
// setting; `run --token` is the same one for a lone agent): its default and
// environment variable are the key's, or a deprecated alias's
// (envAliases) when the key's variable is not set.
func bindKeyEnv(fl *pflag.FlagSet, p *string, name, flag, help string) {
	k, ok := config.Lookup(name)
	if !ok || k.Type() != "string" {
		panic("bindKeyEnv: " + name + " is not a string key")
	}
	def := envOr(k.Env, k.Default)
	for _, a := range envAliases {
		if a.key == name && a.flag == flag && os.Getenv(k.Env) == "" {
			def = envOr(a.old, def)
		}
	}
	fl.StringVar(p, flag, def, help+" (env "+k.Env+")")
}

// warnDeprecatedEnv logs each deprecated variable (envAliases) that gave a
// flag of fl its value: set, the key's own variable not set, and the flag
// not given.
func warnDeprecatedEnv(fl *pflag.FlagSet, log zerolog.Logger) {
	for _, a := range envAliases {
		k, _ := config.Lookup(a.key)
		f := fl.Lookup(a.flag)
		if f == nil || f.Changed || os.Getenv(k.Env) != "" || os.Getenv(a.old) == "" {
			continue
		}
		log.Warn().Str("variable", a.old).Str("use", k.Env).
			Msgf("%s is deprecated: set %s instead (the same setting, named as in the configuration's key table); %s still works for now", a.old, k.Env, a.old)
	}
}
