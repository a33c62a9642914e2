//go:build !nohub

package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/enroll"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

type hubFlags struct {
	state        string
	listen       string
	broker       string
	deviceBroker string
	adminUser    string
	prefix       string
	ca           string
	tlsCert      string
	tlsKey       string
	device       string
	ttl          time.Duration
}

func newHubCmd(g *globals) *cobra.Command {
	hub := &cobra.Command{Use: "hub", Short: "The operator's side of enrolment: one-time tokens, and the server devices enrol with", Args: cobra.NoArgs}
	var f hubFlags
	stateFlag := func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&f.state, "state", envOr("OPENSTARRY_HUB_STATE", "./hub"), "the hub's state directory: tokens, used tokens, enrolled devices (env OPENSTARRY_HUB_STATE)")
	}
	token := &cobra.Command{
		Use:   "token [--state DIR] [--device ID] [--ttl 24h]",
		Short: "Make a one-time enrolment token and print it",
		Long: `Make a one-time enrolment token and print it. Only its sha256 is kept, in
STATE/tokens. A device spends it with openstarry enroll --token. --device binds
it to a device id: the device gets that id, even one enrolled before with
another key (a replaced board). Without --device the device asks for its id
(enroll --device), or the hub names it from its key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.ttl <= 0 {
				return errors.New("--ttl must be positive")
			}
			tok, err := enroll.NewToken(f.state, f.device, f.ttl, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	stateFlag(token)
	token.Flags().StringVar(&f.device, "device", "", "bind the token to this device id")
	token.Flags().DurationVar(&f.ttl, "ttl", 24*time.Hour, "how long the token is valid")
	hub.AddCommand(token)

	serve := &cobra.Command{
		Use:   "serve --broker URL [--admin-user NAME] [--listen ADDR] [--state DIR]",
		Short: "Serve POST /v1/enroll: spend a token, create or rotate the device's broker client (Mosquitto dynamic security)",
		Long: `Serve the enrolment endpoint, POST /v1/enroll. For each valid one-time token it
creates the device's client and role on the broker through Mosquitto's
dynamic security plugin ($CONTROL/dynamic-security/v1), or, for a device
enrolled before, sets a new password and disconnects the old sessions.

The hub logs in to --broker as the plugin's admin (--admin-user, password in
OPENSTARRY_HUB_ADMIN_PASSWORD, never on the command line). Devices get
--device-broker (default --broker) as their broker URL. Off loopback the
listener needs --tls-cert and --tls-key: the answer carries a password.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return hubServe(cmd, f, g.logger()) },
	}
	stateFlag(serve)
	fl := serve.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8088", "address of the enrolment endpoint")
	fl.StringVar(&f.broker, "broker", envOr("OPENSTARRY_BROKER", "tcp://"+broker.DefaultListen), "the broker whose dynamic security plugin the hub drives (env OPENSTARRY_BROKER)")
	fl.StringVar(&f.deviceBroker, "device-broker", "", "the broker URL devices get (default --broker)")
	fl.StringVar(&f.adminUser, "admin-user", envOr("OPENSTARRY_HUB_ADMIN_USER", "admin"), "the dynamic security plugin's admin client (env OPENSTARRY_HUB_ADMIN_USER); password in OPENSTARRY_HUB_ADMIN_PASSWORD")
	fl.StringVar(&f.prefix, "topic-prefix", mqtt.DefaultTopicPrefix, "first level of every topic, for the devices' access rules")
	fl.StringVar(&f.ca, "mqtt-ca", "", "PEM CA of the broker's certificate (ssl:// or mqtts://)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate of the enrolment endpoint")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	hub.AddCommand(serve)

	var of hubFlags
	operator := &cobra.Command{Use: "operator", Short: "The fleet's operators on the hub (Mosquitto dynamic security)", Args: cobra.NoArgs}
	add := &cobra.Command{
		Use:   "add NAME [--broker URL] [--admin-user NAME]",
		Short: "Create an operator: a broker client that may send signed commands and tasks and read the fleet",
		Long: `Create the broker client NAME with the role ` + enroll.OperatorRole + `, through
Mosquitto's dynamic security plugin: it may publish signed commands
(PREFIX/+/commands/+), tasks to an agent (PREFIX/+/agents/+/tasks) and fleet
tasks (PREFIX/fleet/tasks), and subscribe to everything under PREFIX (statuses,
telemetry, results, replies, dead letters). fleet command, fleet status and
task send log in as it with --mqtt-username and --mqtt-password.

The password is OPENSTARRY_HUB_OPERATOR_PASSWORD, or a new random one printed
once. For an operator that exists, the password is set again and the role
added. The hub logs in as the plugin's admin (--admin-user, password in
OPENSTARRY_HUB_ADMIN_PASSWORD).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return hubOperatorAdd(cmd, of, args[0]) },
	}
	fl = add.Flags()
	fl.StringVar(&of.broker, "broker", envOr("OPENSTARRY_BROKER", "tcp://"+broker.DefaultListen), "the broker whose dynamic security plugin the hub drives (env OPENSTARRY_BROKER)")
	fl.StringVar(&of.adminUser, "admin-user", envOr("OPENSTARRY_HUB_ADMIN_USER", "admin"), "the dynamic security plugin's admin client (env OPENSTARRY_HUB_ADMIN_USER); password in OPENSTARRY_HUB_ADMIN_PASSWORD")
	fl.StringVar(&of.prefix, "topic-prefix", mqtt.DefaultTopicPrefix, "first level of every topic, for the operator's access rules")
	fl.StringVar(&of.ca, "mqtt-ca", "", "PEM CA of the broker's certificate (ssl:// or mqtts://)")
	operator.AddCommand(add)
	hub.AddCommand(operator)
	return hub
}

func hubOperatorAdd(cmd *cobra.Command, f hubFlags, name string) error {
	if err := mqtt.ValidatePrefix(f.prefix); err != nil {
		return fmt.Errorf("--topic-prefix: %w", err)
	}
	password, generated := os.Getenv("OPENSTARRY_HUB_OPERATOR_PASSWORD"), false
	if password == "" {
		b := make([]byte, 18)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		password, generated = base64.RawURLEncoding.EncodeToString(b), true
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 20*time.Second)
	defer cancel()
	ds, err := enroll.DialDynSec(ctx, mqtt.DialOptions{Broker: f.broker, Username: f.adminUser,
		Password: os.Getenv("OPENSTARRY_HUB_ADMIN_PASSWORD"), CAFile: f.ca, Timeout: 10 * time.Second})
	if err != nil {
		if errors.Is(err, mqtt.ErrBadCredentials) || errors.Is(err, mqtt.ErrNotAuthorized) {
			return fmt.Errorf("%w; check --admin-user and OPENSTARRY_HUB_ADMIN_PASSWORD (the dynamic security plugin's admin)", err)
		}
		return mqttHint(err)
	}
	defer ds.Close()
	created, err := enroll.AddOperator(ctx, ds, f.prefix, name, password)
	if err != nil {
		return err
	}
	verb := "created"
	if !created {
		verb = "updated (new password, role added)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "operator %s %s on %s with role %s\n", name, verb, f.broker, enroll.OperatorRole)
	if generated {
		fmt.Fprintf(cmd.OutOrStdout(), "password: %s\n", password)
	}
	return nil
}

func hubServe(cmd *cobra.Command, f hubFlags, log zerolog.Logger) error {
	if err := mqtt.ValidatePrefix(f.prefix); err != nil {
		return fmt.Errorf("--topic-prefix: %w", err)
	}
	if _, _, err := mqtt.ParseBrokerURL(f.broker); err != nil {
		return fmt.Errorf("--broker: %w", err)
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", f.listen, err)
	}
	tls := f.tlsCert != "" || f.tlsKey != ""
	if ip := net.ParseIP(host); !tls && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %s is not loopback: give --tls-cert and --tls-key (the answer carries a password)", f.listen)
	}
	if err := os.MkdirAll(f.state, 0o700); err != nil {
		return err
	}
	log = log.With().Str("component", "hub").Logger()
	dial := mqtt.DialOptions{Broker: f.broker, Username: f.adminUser, Password: os.Getenv("OPENSTARRY_HUB_ADMIN_PASSWORD"),
		CAFile: f.ca, Timeout: 10 * time.Second}
	h := &enroll.Hub{State: f.state, Broker: orDefault(f.deviceBroker, f.broker), TopicPrefix: f.prefix, Log: log,
		Reserved: []string{f.adminUser},
		Dial:     func(ctx context.Context) (enroll.Controller, error) { return enroll.DialDynSec(ctx, dial) }}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	var limits httpx.Limits
	srv := httpx.NewServer(h.Handler(), limits)
	scheme := "http"
	if tls {
		scheme = "https"
	}
	log.Info().Str("addr", ln.Addr().String()).Str("broker", f.broker).Str("state", f.state).
		Msgf("hub: enrolment listening on %s://%s", scheme, ln.Addr())
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		if tls {
			errc <- srv.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// hubCompiledIn is what version says of the enrolment hub.
const hubCompiledIn = "yes"
