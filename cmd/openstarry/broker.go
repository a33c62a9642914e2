package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/transport/broker"
)

func newBrokerCmd() *cobra.Command {
	brokerCmd := &cobra.Command{
		Use:   "broker",
		Short: "Tools for the embedded MQTT broker",
		Args:  cobra.NoArgs,
	}
	hash := &cobra.Command{
		Use:   "hash-password",
		Short: "Read a password from stdin and print its hash for a --broker-users file",
		Long: `Read one line (the password) from standard input and print its hash
($7$: PBKDF2-HMAC-SHA512, the format of mosquitto_passwd, so the same hash
works in a Mosquitto password file) for the "password_hash" of a user in the
embedded broker's --broker-users file:

  printf '%s\n' "$PASSWORD" | openstarry broker hash-password`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && line == "" {
				return errors.New("no password on standard input")
			}
			pw := strings.TrimRight(line, "\r\n")
			if pw == "" {
				return errors.New("the password is empty")
			}
			h, err := broker.HashPassword(pw)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), h)
			return nil
		},
	}
	brokerCmd.AddCommand(hash)
	return brokerCmd
}
