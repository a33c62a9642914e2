package connpass

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/openstarry/openstarry-edge/core/httpx"
)

// FromEnv reads the Settings of EnvHandoff and removes the variable, and
// marks the descriptor it names closed on exec: nothing the agent starts
// (an MCP server) inherits either. nil when it is not set. Call it before
// the agent starts anything.
func FromEnv() (*Settings, error) {
	v, ok := os.LookupEnv(EnvHandoff)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(EnvHandoff)
	var s Settings
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvHandoff, err)
	}
	if s.FD < 3 {
		return nil, fmt.Errorf("%s: descriptor %d", EnvHandoff, s.FD)
	}
	if s.TokenSHA256 != "" {
		if b, err := hex.DecodeString(s.TokenSHA256); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s: token_sha256 is not a hex SHA-256", EnvHandoff)
		}
	}
	closeOnExec(s.FD)
	return &s, nil
}

// Serve opens the agent's end of the pair, serves the connections the
// daemon hands over with o.API, and tells the daemon it takes them. stop
// tells the daemon it takes no more, closes the idle connections (their
// clients reconnect to the daemon), lets the requests under way finish
// within ctx, and closes the pair.
func Serve(o AgentOptions) (stop func(ctx context.Context), err error) {
	l, err := Open(uintptr(o.Settings.FD))
	if err != nil {
		return nil, err
	}
	a := &agentSide{o: o, link: l, prefix: "/agents/" + o.AgentID + "/"}
	if o.Settings.TokenSHA256 != "" {
		a.tokenHash, _ = hex.DecodeString(o.Settings.TokenSHA256)
	}
	addr, _ := net.ResolveTCPAddr("tcp", o.Addr)
	a.ln = NewListener(addr)
	a.srv = httpx.NewServer(a, o.Settings.Limits)
	a.srv.ConnContext = ConnContext
	go func() { _ = a.srv.Serve(a.ln) }()
	a.wg.Add(1)
	go a.recv()
	if err := l.Send(Message{Kind: KindReady}, nil); err != nil {
		a.stop(context.Background())
		return nil, fmt.Errorf("connpass: telling the daemon: %w", err)
	}
	return a.stop, nil
}

type agentSide struct {
	o         AgentOptions
	link      *Link
	ln        *Listener
	srv       *http.Server
	prefix    string // "/agents/ID/"
	tokenHash []byte // nil: no token
	wg        sync.WaitGroup
}

// recv takes the connections the daemon sends until the pair closes.
func (a *agentSide) recv() {
	defer a.wg.Done()
	for {
		m, f, err := a.link.Recv()
		if errors.Is(err, ErrDropped) {
			a.o.Log.Warn().Err(err).Msg("connection hand-off: a message from the daemon was dropped")
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				a.o.Log.Warn().Err(err).Msg("connection hand-off: the pair with the daemon failed; no more connections are taken")
			}
			return
		}
		if m.Kind != KindConn {
			if f != nil {
				f.Close()
			}
			continue
		}
		c, err := FileConn(f)
		if err != nil {
			a.o.Log.Warn().Err(err).Msg("connection hand-off: unusable socket")
			_ = a.link.Send(Message{Kind: KindClosed, ID: m.ID}, nil)
			continue
		}
		pc := NewConn(c, m.ID, m.Data, a.closed)
		if !a.ln.Put(pc) {
			// Stopping: the daemon serves it.
			a.giveBack(pc, m.Data)
		}
	}
}

// closed tells the daemon that a connection it handed over is closed (it
// frees its place under the listener's connection cap).
func (a *agentSide) closed(c *Conn) { _ = a.link.Send(Message{Kind: KindClosed, ID: c.ID}, nil) }

// giveBack sends an unserved connection back.
func (a *agentSide) giveBack(pc *Conn, data []byte) {
	pc.detached.Store(true)
	if err := a.link.Send(Message{Kind: KindBack, ID: pc.ID, Data: data}, pc.Conn); err != nil {
		_ = pc.Conn.Close()
		a.closed(pc)
		return
	}
	_ = pc.Conn.Close()
}

func (a *agentSide) stop(ctx context.Context) {
	_ = a.link.Send(Message{Kind: KindStop}, nil)
	_ = a.srv.Shutdown(ctx)
	_ = a.ln.Close()
	_ = a.link.Close()
	a.wg.Wait()
}

// ServeHTTP answers a request of a handed connection: itself when it is for
// this agent and the daemon would have forwarded it unchanged; otherwise it
// hands the connection back to the daemon, which answers it as its own.
func (a *agentSide) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !a.mine(r) {
		a.handBack(w, r)
		return
	}
	// What the daemon's forward does (core/daemon/forward.go): the
	// client's Authorization, Forwarded and X-Forwarded-* and the
	// hop-by-hop headers do not reach the API; the daemon's token does.
	h := r.Header
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range dropped {
		delete(h, k)
	}
	h.Set("Authorization", "Bearer "+a.o.LocalToken)
	r.Host = a.o.Addr
	a.o.API.ServeHTTP(w, r)
}

// dropped are the request headers the daemon's forward does not pass.
var dropped = []string{"Authorization", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}

// mine reports whether r is one the daemon would pass to this agent
// unchanged, under the daemon's rules: its path is under /agents/ID/ as
// the daemon's router reads it (clean, no escaped slash), its Host is one
// http.hosts allows, it carries nothing the web UI judges (a cookie, an
// Origin, Sec-Fetch-Site), it does not switch protocols, and it comes from
// loopback or with http.token. Anything else goes back: there the daemon
// answers it (a 403, a 401 it counts against the address, a redirect, its
// own routes).
func (a *agentSide) mine(r *http.Request) bool {
	p := r.URL.Path
	if r.URL.RawPath != "" || !strings.HasPrefix(p, a.prefix) || cleanPath(p) != p {
		return false
	}
	if !httpx.HostAllowed(r.Host, a.o.Settings.Hosts) {
		return false
	}
	h := r.Header
	if len(h["Cookie"]) > 0 || len(h["Origin"]) > 0 || len(h["Sec-Fetch-Site"]) > 0 || len(h["Upgrade"]) > 0 {
		return false
	}
	if a.tokenHash != nil && !httpx.FromLoopback(r) {
		got, ok := httpx.Bearer(r)
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], a.tokenHash) != 1 {
			return false
		}
	}
	return true
}

// cleanPath is what http.ServeMux redirects a path to: path.Clean, keeping
// a trailing slash.
func cleanPath(p string) string {
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// handBack sends r's connection, with r unread, back to the daemon.
func (a *agentSide) handBack(w http.ResponseWriter, r *http.Request) {
	t, err := Take(w, r)
	if err != nil {
		httpx.Error(w, http.StatusBadGateway, "handoff", "this connection cannot be handed back to the daemon: "+err.Error())
		return
	}
	pc, _ := t.Outer.(*Conn)
	if pc == nil {
		_ = t.Outer.Close()
		return
	}
	if err := a.link.Send(Message{Kind: KindBack, ID: pc.ID, Data: t.Data}, t.Sock); err != nil {
		a.o.Log.Warn().Err(err).Str("path", r.URL.Path).Msg("connection hand-off: could not hand a connection back to the daemon; closing it")
		_, _ = t.Sock.Write(backFailed)
		_ = t.Sock.Close()
		a.closed(pc)
		return
	}
	_ = t.Sock.Close()
}

// backFailed answers a request that could be neither served nor handed
// back (its head larger than MaxMessage, or the daemon gone).
var backFailed = []byte("HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 81\r\n\r\n" +
	`{"error":"the agent could not hand this request to the daemon","code":"handoff"}` + "\n")
