package config

import (
	"strings"
	"time"
)

// Var is one key of a Config as a command-line flag value: it implements
// flag.Value and spf13/pflag.Value, so the command line's flags are
// generated from Keys rather than declared again. A list flag may be
// repeated: its first use replaces the value, later uses append to it.
type Var struct {
	c   *Config
	k   Key
	set bool
}

// Var returns k's value in c as a flag value.
func (c *Config) Var(k Key) *Var { return &Var{c: c, k: k} }

func (v *Var) String() string {
	s, _ := v.c.Get(v.k.Name)
	return s
}

// Set parses s as the key's value (lists comma-separated).
func (v *Var) Set(s string) error {
	field := v.k.field(v.c)
	if list, ok := field.(*[]string); ok && v.set {
		var more []string
		if err := setText(&more, s); err != nil {
			return err
		}
		*list = append(*list, more...)
		return nil
	}
	v.set = true
	return setText(field, s)
}

// Type names the value's type in help texts.
func (v *Var) Type() string { return v.k.Type() }

// Type is the type of the key's value: string, int, bool, duration or
// strings (a list).
func (k Key) Type() string {
	switch k.field(&Config{}).(type) {
	case *int:
		return "int"
	case *bool:
		return "bool"
	case *time.Duration:
		return "duration"
	case *[]string:
		return "strings"
	}
	return "string"
}

// IsBoolFlag lets a boolean flag stand without a value (flag package).
func (v *Var) IsBoolFlag() bool { return v.Type() == "bool" }

// AgentArgs encodes the keys marked Agent for an agent process, in the
// order of Keys: a string as "--flag value", a true bool as "--flag", any
// other value as "--flag=value"; a secret as "ENV=value" in env, never on
// a command line, where ps shows it. Empty, false and zero values are left
// out: the agent's own default stands.
func (c *Config) AgentArgs() (args, env []string) {
	for _, k := range Keys {
		if !k.Agent {
			continue
		}
		v, _ := c.Get(k.Name)
		var zero bool
		switch p := k.field(c).(type) {
		case *string:
			zero = *p == ""
		case *bool:
			zero = !*p
		case *int:
			zero = *p == 0
		case *time.Duration:
			zero = *p == 0
		case *[]string:
			zero = len(*p) == 0
		}
		switch {
		case zero:
		case k.Secret:
			env = append(env, k.Env+"="+v)
		case k.Type() == "bool":
			args = append(args, "--"+k.Flag)
		case k.Type() == "string":
			args = append(args, "--"+k.Flag, v)
		default:
			args = append(args, "--"+k.Flag+"="+v)
		}
	}
	return args, env
}

// FlagKeys returns the keys with a command-line flag under the given
// sections ("mqtt", "design") or with the given names ("data").
func FlagKeys(sections ...string) []Key {
	var out []Key
	for _, k := range Keys {
		if k.Flag == "" {
			continue
		}
		for _, s := range sections {
			if k.Name == s || strings.HasPrefix(k.Name, s+".") {
				out = append(out, k)
				break
			}
		}
	}
	return out
}
