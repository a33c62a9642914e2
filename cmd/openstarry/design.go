package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"
)

func newDesignCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "design",
		Short: "The design layer: serve agent templates to a fleet",
	}
	cmd.AddCommand(newDesignServeCmd(g))
	return cmd
}

// designServeFlags are the flags of design serve.
type designServeFlags struct {
	dir      string
	listen   string
	keys     []string
	tlsCert  string
	tlsKey   string
	shutdown time.Duration
}

func newDesignServeCmd(g *globals) *cobra.Command {
	var f designServeFlags
	cmd := &cobra.Command{
		Use:   "serve --dir DIR [--listen ADDR]",
		Short: "Serve the templates of DIR over HTTP to devices",
		Long: `Serve the templates of DIR (every *.json directly in it, with its optional
NAME.json.sig) to devices whose design.url points here:

  GET /templates         JSON list: name, version, role, digest, signed
  GET /templates/NAME    the template's bytes; ETag is its sha256 digest,
                         If-None-Match answers 304; X-Openstarry-Signature
                         carries NAME.json.sig when present
  GET /healthz

Every template is validated at startup; one invalid template (or, with
--trusted-key, one unsigned or badly signed one) and the server refuses to
start, listing every error. An empty DIR is refused too: devices take a
"template_not_found" answer as the withdrawal of a template and delete their
cached copy. SIGHUP reloads DIR; a reload that does not validate is refused
and the old templates stay served.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDesignServe(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g.logger(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", envOr("OPENSTARRY_DESIGN_DIR", ""), "template directory to serve (env OPENSTARRY_DESIGN_DIR)")
	fl.StringVar(&f.listen, "listen", envOr("OPENSTARRY_DESIGN_LISTEN", "127.0.0.1:8780"), "listen address (env OPENSTARRY_DESIGN_LISTEN)")
	fl.StringArrayVar(&f.keys, "trusted-key", nil, "public key (base64, or a .pub file) that must have signed every template; repeatable")
	fl.StringVar(&f.tlsCert, "tls-cert", envOr("OPENSTARRY_DESIGN_TLS_CERT", ""), "serve HTTPS with this certificate (PEM; env OPENSTARRY_DESIGN_TLS_CERT)")
	fl.StringVar(&f.tlsKey, "tls-key", envOr("OPENSTARRY_DESIGN_TLS_KEY", ""), "private key of --tls-cert (PEM; env OPENSTARRY_DESIGN_TLS_KEY)")
	fl.DurationVar(&f.shutdown, "shutdown-timeout", 5*time.Second, "how long to let requests finish on SIGINT/SIGTERM")
	return cmd
}

// loadServeDir loads and checks the directory design serve publishes.
func loadServeDir(dir string, keys []ed25519.PublicKey) (*design.Set, error) {
	set, err := templateValidator().LoadDir(dir)
	var errs design.ValidationErrors
	if err != nil && !errors.As(err, &errs) {
		return nil, err
	}
	if len(keys) > 0 {
		errs = append(errs, design.VerifySet(set, keys)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	if set.Len() == 0 {
		return nil, fmt.Errorf("no templates (*.json) in %s", dir)
	}
	return set, nil
}

func runDesignServe(ctx context.Context, stdout, stderr io.Writer, log zerolog.Logger, f designServeFlags) error {
	if f.dir == "" {
		return exitCode(1, errors.New("design serve: --dir DIR is required"))
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return exitCode(1, errors.New("design serve: --tls-cert and --tls-key go together"))
	}
	keys, err := readTrustedKeys(f.keys)
	if err != nil {
		return exitCode(1, fmt.Errorf("design serve: %w", err))
	}
	set, err := loadServeDir(f.dir, keys)
	if err != nil {
		var errs design.ValidationErrors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(stderr, e.Error())
			}
			return exitCode(1, fmt.Errorf("design serve: refusing to start: %d %s in %d %s of %s",
				len(errs), plural(len(errs), "error", "errors"), errs.Files(), plural(errs.Files(), "template", "templates"), f.dir))
		}
		return exitCode(1, fmt.Errorf("design serve: refusing to start: %w", err))
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return exitCode(1, fmt.Errorf("design serve: %w", err))
	}
	h := design.NewServer(set, log)
	// GET and HEAD only, answers never wait: a whole-request read timeout
	// and a write timeout are safe here on top of the shared limits.
	srv := httpx.NewServer(h, httpx.Limits{})
	srv.ReadTimeout, srv.WriteTimeout = 30*time.Second, 30*time.Second
	ln = httpx.Listen(ln, httpx.Limits{}, f.tlsCert != "", log)
	scheme := "http"
	if f.tlsCert != "" {
		scheme = "https"
	}
	served := make(chan error, 1)
	go func() {
		if f.tlsCert != "" {
			served <- srv.ServeTLS(ln, f.tlsCert, f.tlsKey)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	url := fmt.Sprintf("%s://%s", scheme, ln.Addr())
	log.Info().Str("url", url).Str("dir", f.dir).Int("templates", set.Len()).Strs("names", set.Names()).Msg("design layer serving")
	fmt.Fprintf(stdout, "design layer: serving %d %s from %s on %s\n", set.Len(), plural(set.Len(), "template", "templates"), f.dir, url)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case err := <-served:
			return exitCode(1, fmt.Errorf("design serve: %w", err))
		case <-hup:
			next, err := loadServeDir(f.dir, keys)
			if err != nil {
				log.Error().Str("dir", f.dir).Str("errors", err.Error()).Msg("reload refused; still serving the previous templates")
				continue
			}
			h.Swap(next)
			log.Info().Str("dir", f.dir).Int("templates", next.Len()).Strs("names", next.Names()).Msg("design layer reloaded")
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
			err := srv.Shutdown(sctx)
			cancel()
			if err != nil {
				return exitCode(1, fmt.Errorf("design serve: shutdown: %w", err))
			}
			log.Info().Msg("design layer stopped")
			return nil
		}
	}
}
