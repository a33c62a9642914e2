package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/wiring"
	"github.com/openstarry/openstarry-edge/core/design"
)

// templateValidator is the binary's template Validator (the wiring's: the
// tool registry names the known tools).
func templateValidator() design.Validator { return wiring.TemplateValidator() }

func newTemplatesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "templates",
		Short: "Validate, sign and inspect agent templates (blueprints)",
	}
	cmd.AddCommand(newTemplatesValidateCmd(), newTemplatesKeygenCmd(), newTemplatesSignCmd(), newTemplatesSchemaCmd())
	return cmd
}

func newTemplatesValidateCmd() *cobra.Command {
	var keyFiles []string
	cmd := &cobra.Command{
		Use:   "validate DIR|FILE...",
		Short: "Validate templates; list every error and exit 1 if there is one",
		Long: `Validate templates against the template schema and the rules it cannot state
(known tools, a master's workers exist, unique names, NAME.json file names).

A DIR is validated as a set: every *.json file directly in it. A FILE is
validated in the context of its directory, so that the workers it names are
looked up beside it; only the FILE's errors are reported.

Errors print one per line as "FILE: /json/pointer: rule: message".
With --trusted-key every template must also carry a valid NAME.json.sig.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := readTrustedKeys(keyFiles)
			if err != nil {
				return exitCode(1, err)
			}
			return validateTemplates(cmd.OutOrStdout(), templateValidator(), keys, args)
		},
	}
	cmd.Flags().StringArrayVar(&keyFiles, "trusted-key", nil, "public key (base64, or a .pub file) that must have signed every template; repeatable")
	return cmd
}

// validateTemplates validates args and prints every error to out, then
// "N templates valid" when there is none.
func validateTemplates(out io.Writer, v design.Validator, keys []ed25519.PublicKey, args []string) error {
	var all design.ValidationErrors
	total := 0
	for _, arg := range args {
		n, errs, err := validatePath(v, keys, arg)
		if err != nil {
			return exitCode(1, err)
		}
		total += n
		all = append(all, errs...)
	}
	if len(all) > 0 {
		for _, e := range all {
			fmt.Fprintln(out, e.Error())
		}
		return exitCode(1, fmt.Errorf("%d %s in %d of %d %s", len(all), plural(len(all), "error", "errors"),
			all.Files(), total, plural(total, "template", "templates")))
	}
	fmt.Fprintf(out, "%d %s valid\n", total, plural(total, "template", "templates"))
	return nil
}

// validatePath validates one DIR or FILE argument; n is the number of
// templates it holds.
func validatePath(v design.Validator, keys []ed25519.PublicKey, arg string) (n int, errs design.ValidationErrors, err error) {
	st, err := os.Stat(arg)
	if err != nil {
		return 0, nil, fmt.Errorf("templates validate: %w", err)
	}
	if st.IsDir() {
		set, err := v.LoadDir(arg)
		if err != nil && !errors.As(err, &errs) {
			return 0, nil, fmt.Errorf("templates validate: %w", err)
		}
		if len(keys) > 0 {
			errs = append(errs, design.VerifySet(set, keys)...)
		}
		// Each file once: a valid template whose signature fails is in the
		// set and has errors.
		files := map[string]bool{}
		for _, name := range set.Names() {
			e, _ := set.Get(name)
			files[e.File] = true
		}
		for _, e := range errs {
			files[e.File] = true
		}
		return len(files), errs, nil
	}

	dir, base := filepath.Split(arg)
	if dir == "" {
		dir = "."
	}
	label := filepath.Join(dir, base)
	if !strings.HasSuffix(base, ".json") || strings.HasPrefix(base, ".") {
		// Not something a template directory would hold: check it alone.
		data, err := os.ReadFile(arg)
		if err != nil {
			return 0, nil, fmt.Errorf("templates validate: %w", err)
		}
		if _, err := v.Validate(arg, data); err != nil {
			errors.As(err, &errs)
		}
		errs = append(errs, design.ValidationError{File: arg, Path: "/name", Rule: design.RuleFileName,
			Message: "a template file is named NAME.json"})
		return 1, errs, nil
	}
	set, err := v.LoadDir(dir)
	var setErrs design.ValidationErrors
	if err != nil && !errors.As(err, &setErrs) {
		return 0, nil, fmt.Errorf("templates validate: %w", err)
	}
	errs = setErrs.ForFile(label)
	if len(errs) == 0 && len(keys) > 0 {
		for _, name := range set.Names() {
			if e, _ := set.Get(name); e.File == label {
				if err := design.VerifyEntry(e, keys); err != nil {
					errors.As(err, &errs)
				}
			}
		}
	}
	return 1, errs, nil
}

func newTemplatesKeygenCmd() *cobra.Command {
	var out string
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen --out PREFIX",
		Short: "Create an ed25519 key pair for signing templates",
		Long: `Create PREFIX.key (the private signing key, mode 0600: keep it on the
machine that publishes templates, never on a device) and PREFIX.pub (the
public key: put it, or its content, in design.trusted_keys on the devices).
Both hold one base64 line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return exitCode(1, errors.New("templates keygen: --out PREFIX is required"))
			}
			pub, err := design.GenerateKeyFiles(out, force, nil)
			if err != nil {
				return exitCode(1, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s.key (private; keep it off the devices) and %s.pub\nkey id: %s\npublic key: %s\n",
				out, out, design.KeyID(pub), design.EncodePublicKey(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "path prefix of the key files (PREFIX.key, PREFIX.pub)")
	cmd.Flags().BoolVar(&force, "force", false, "replace existing key files")
	return cmd
}

func newTemplatesSignCmd() *cobra.Command {
	var keyFile string
	var withKeyID bool
	cmd := &cobra.Command{
		Use:   "sign --key FILE TEMPLATE.json...",
		Short: "Sign templates: write TEMPLATE.json.sig beside each",
		Long: `Sign each template with the private key and write TEMPLATE.json.sig, holding
"ed25519:<base64>" (or "ed25519:<key id>:<base64>" with --key-id). The
signature covers the file's exact bytes: any later edit needs a new signature.
A template that does not validate is not signed.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if keyFile == "" {
				return exitCode(1, errors.New("templates sign: --key FILE is required"))
			}
			priv, err := design.ReadPrivateKeyFile(keyFile)
			if err != nil {
				return exitCode(1, err)
			}
			pub := priv.Public().(ed25519.PublicKey)
			for _, path := range args {
				sigPath, err := design.SignFile(templateValidator(), priv, path, withKeyID)
				if err != nil {
					return exitCode(1, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "signed %s -> %s (key id %s)\n", path, sigPath, design.KeyID(pub))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "private key file written by templates keygen (PREFIX.key)")
	cmd.Flags().BoolVar(&withKeyID, "key-id", false, "name the signing key in the signature (for rotating keys)")
	return cmd
}

func newTemplatesSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the template JSON Schema (draft 2020-12), for editors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(design.Schema())
			return err
		},
	}
}

// readTrustedKeys parses --trusted-key values: base64 keys or .pub files.
func readTrustedKeys(vals []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if strings.TrimSpace(s) == "" {
				continue
			}
			k, err := design.ParseTrustedKey(s)
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
