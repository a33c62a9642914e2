package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/release"
)

func newVerifyReleaseCmd() *cobra.Command {
	var keys []string
	var cfgPath string
	verify := &cobra.Command{
		Use:   "verify-release [--key PUB]... [--config FILE] [DIR]",
		Short: "Check a release directory: SHA256SUMS signed by a trusted key, every file's checksum",
		Long: `Check a release directory (default: the current one): SHA256SUMS.sig must be a
good ed25519 signature over SHA256SUMS by one of the trusted keys, every file
SHA256SUMS lists must be there with its sha256, and no other file may be.
Trusted keys come from --key (base64, or a .pub file made by "openstarry
templates keygen") and from design.trusted_keys of --config. Exit 1 on any
failure, listing each.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			trusted, err := readTrustedKeys(keys)
			if err != nil {
				return exitCode(1, err)
			}
			if cfgPath != "" {
				cfg, err := config.Load(cfgPath, func(string) (string, bool) { return "", false })
				if err != nil {
					return exitCode(1, err)
				}
				more, err := readTrustedKeys(cfg.Design.TrustedKeys)
				if err != nil {
					return exitCode(1, fmt.Errorf("%s: design.trusted_keys: %w", cfgPath, err))
				}
				trusted = append(trusted, more...)
			}
			if len(trusted) == 0 {
				return exitCode(1, errors.New("verify-release: no trusted key: give --key PUB (the fleet's public key) or --config with design.trusted_keys"))
			}
			sums, err := release.Verify(dir, trusted)
			if err != nil {
				return exitCode(1, err)
			}
			for _, s := range sums {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", s.Name)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "release %s: %d %s verified, %s signed by a trusted key\n",
				dir, len(sums), plural(len(sums), "file", "files"), release.SumsFile)
			return nil
		},
	}
	verify.Flags().StringArrayVar(&keys, "key", nil, "trusted public key (base64, or a .pub file); repeatable")
	verify.Flags().StringVar(&cfgPath, "config", "", "configuration file whose design.trusted_keys are trusted too")
	return verify
}

func newSignReleaseCmd() *cobra.Command {
	var keyFile string
	sign := &cobra.Command{
		Use:   "sign-release --key FILE [DIR]",
		Short: "Write SHA256SUMS over every file of a release directory and sign it (SHA256SUMS.sig)",
		Long: `Write SHA256SUMS (sha256sum's format) over every regular file of DIR (default:
the current directory) and SHA256SUMS.sig, its ed25519 signature naming the
key, with the private key made by "openstarry templates keygen" (the key that
signs the fleet's templates). make release runs it; "openstarry
verify-release --key PREFIX.pub DIR" checks the result.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if keyFile == "" {
				return exitCode(1, errors.New("sign-release: --key FILE is required (make one with: openstarry templates keygen --out PREFIX)"))
			}
			priv, err := design.ReadPrivateKeyFile(keyFile)
			if err != nil {
				return exitCode(1, err)
			}
			sums, err := release.Sign(dir, priv)
			if err != nil {
				return exitCode(1, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %d %s: %s, %s (key id %s)\n", len(sums), plural(len(sums), "file", "files"),
				filepath.Join(dir, release.SumsFile), filepath.Join(dir, release.SigFile), design.KeyID(priv.Public().(ed25519.PublicKey)))
			return nil
		},
	}
	sign.Flags().StringVar(&keyFile, "key", "", "private key file (PREFIX.key from templates keygen)")
	return sign
}
