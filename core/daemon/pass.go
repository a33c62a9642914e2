package daemon

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/connpass"
)

// The daemon's side of the connection hand-off (core/connpass): a request
// for /agents/{id}/... on the HTTP listener that forward.go would take,
// for an agent whose process said it takes connections, is not forwarded:
// the daemon takes the client's connection out of its server and sends its
// socket, with the bytes it read, to the agent over the pair it gave the
// process at spawn, and closes its own descriptor. The agent serves that
// connection from then on, under the daemon's rules for its listener, and
// sends back what is not for it (another agent, /status, a request the
// daemon's rules refuse); the daemon serves those as its own connections,
// on a second server with the same handler and limits (passServer).
//
// The daemon keeps, per connection handed out, the listener's wrapper of
// it, whose Close frees its place under http's connection cap: freed when
// the agent says the connection is closed, or when the agent's process
// ends. So the cap counts the connections agents hold, as before.

// passTimeout bounds one send to an agent: an agent that does not read its
// end within it is not given the connection (the daemon serves it).
const passTimeout = 2 * time.Second

// connPass is the daemon's side of the hand-off: the connections out at
// agents, and the listener of those it serves again.
type connPass struct {
	log      zerolog.Logger
	settings connpass.Settings // for the agents (FD set per spawn)
	ln       *connpass.Listener

	mu   sync.Mutex // guards the fields below
	next uint64
	held map[uint64]*heldConn
}

// heldConn is a connection the daemon handed out, or serves again.
type heldConn struct {
	slot  net.Conn  // the listener's wrapper: Close frees the cap's place
	owner *passLink // the agent that holds it; nil: the daemon serves it again
}

// passLink is the daemon's end of the pair with one agent process.
type passLink struct {
	p     *connPass
	l     *connpass.Link
	agent string
	ready atomic.Bool // the agent said it takes connections, and not yet that it stops
	done  chan struct{}
}

func newConnPass(settings connpass.Settings, log zerolog.Logger) *connPass {
	return &connPass{log: log, settings: settings, ln: connpass.NewListener(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}),
		held: map[uint64]*heldConn{}}
}

// attach makes the pair for the process ls starts: the agent's end goes in
// ls.Files (descriptor 3), its settings in ls.Env. nil (and ls untouched)
// when the pair cannot be made.
func (p *connPass) attach(ls *LaunchSpec) *passLink {
	if p == nil {
		return nil
	}
	l, child, err := connpass.Pair()
	if err != nil {
		p.log.Warn().Err(err).Str("agent", ls.AgentID).Msg("connection hand-off: no pair; the daemon forwards this agent's requests")
		return nil
	}
	s := p.settings
	s.FD = 3 + len(ls.Files)
	js, _ := json.Marshal(s)
	ls.Files = append(ls.Files, child)
	ls.Env = append(ls.Env, connpass.EnvHandoff+"="+string(js))
	return &passLink{p: p, l: l, agent: ls.AgentID, done: make(chan struct{})}
}

// start reads the agent's messages until its process ends.
func (lk *passLink) start() {
	if lk != nil {
		go lk.read()
	}
}

// close ends the link once its process has ended: what the agent sent
// before it ended is read first (a connection handed back), within a
// second.
func (lk *passLink) close() {
	if lk == nil {
		return
	}
	lk.ready.Store(false)
	select {
	case <-lk.done:
	case <-time.After(time.Second):
	}
	_ = lk.l.Close()
	<-lk.done
}

func (lk *passLink) read() {
	defer func() {
		lk.ready.Store(false)
		lk.p.releaseAll(lk)
		close(lk.done)
	}()
	for {
		m, f, err := lk.l.Recv()
		if errors.Is(err, connpass.ErrDropped) {
			lk.p.log.Warn().Err(err).Str("agent", lk.agent).Msg("connection hand-off: a message from the agent was dropped")
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				lk.p.log.Warn().Err(err).Str("agent", lk.agent).Msg("connection hand-off: the pair with the agent failed")
			}
			return
		}
		switch m.Kind {
		case connpass.KindReady:
			lk.ready.Store(true)
		case connpass.KindStop:
			lk.ready.Store(false)
		case connpass.KindClosed:
			lk.p.release(m.ID, lk)
		case connpass.KindBack:
			lk.p.takeBack(m, f, lk)
		default:
			if f != nil {
				f.Close()
			}
		}
	}
}

// passable reports whether r may be handed to an agent: the request
// forward.go would take, on a plain connection the client keeps open after
// it (one closed after its only request gains nothing: the agent would pay
// for taking it what the daemon saves), carrying nothing the web UI judges,
// and not one the daemon took back after a failed hand-off.
func passable(r *http.Request) bool {
	if r.TLS != nil || r.Close || !forwardable(r) {
		return false
	}
	h := r.Header
	if len(h["Cookie"]) > 0 || len(h["Origin"]) > 0 || len(h["Sec-Fetch-Site"]) > 0 {
		return false
	}
	if pc := connpass.FromContext(r.Context()); pc != nil && pc.Skip() {
		return false
	}
	return true
}

// handOff hands r's connection to the agent of lk. false: nothing was
// taken, the caller answers r. true: the connection is the agent's, or,
// when it could not be sent, served again by the daemon (its next request
// forwarded).
func (p *connPass) handOff(w http.ResponseWriter, r *http.Request, lk *passLink) bool {
	t, err := connpass.Take(w, r)
	if err != nil {
		return false
	}
	id := p.own(t)
	if _, ok := t.Sock.(*net.TCPConn); !ok || len(t.Data) > connpass.MaxMessage-64 {
		p.serveAgain(t.Sock, id, t.Data, true)
		return true
	}
	p.setOwner(id, lk)
	_ = lk.l.SetWriteDeadline(time.Now().Add(passTimeout))
	if err := lk.l.Send(connpass.Message{Kind: connpass.KindConn, ID: id, Data: t.Data}, t.Sock); err != nil {
		p.log.Warn().Err(err).Str("agent", lk.agent).Msg("connection hand-off: could not send a connection to the agent; the daemon forwards its requests")
		lk.ready.Store(false)
		p.setOwner(id, nil)
		p.serveAgain(t.Sock, id, t.Data, true)
		return true
	}
	_ = t.Sock.Close()
	return true
}

// own returns the id of a connection taken out of a server: a connection
// served again keeps its id; one from the listener gets one, with its
// wrapper kept as its place under the cap.
func (p *connPass) own(t connpass.Taken) uint64 {
	if pc, ok := t.Outer.(*connpass.Conn); ok {
		return pc.ID
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.held[p.next] = &heldConn{slot: t.Outer}
	return p.next
}

func (p *connPass) setOwner(id uint64, lk *passLink) {
	p.mu.Lock()
	if h := p.held[id]; h != nil {
		h.owner = lk
	}
	p.mu.Unlock()
}

// serveAgain serves sock (data read first) on the daemon's second server.
func (p *connPass) serveAgain(sock net.Conn, id uint64, data []byte, skip bool) {
	pc := connpass.NewConn(sock, id, data, func(c *connpass.Conn) { p.release(c.ID, nil) })
	if skip {
		pc.SkipNext()
	}
	if !p.ln.Put(pc) {
		_ = pc.Close()
	}
}

// takeBack serves a connection the agent of lk handed back.
func (p *connPass) takeBack(m connpass.Message, f *os.File, lk *passLink) {
	c, err := connpass.FileConn(f)
	p.mu.Lock()
	h := p.held[m.ID]
	ok := h != nil && h.owner == lk
	if ok && err == nil {
		h.owner = nil
	}
	p.mu.Unlock()
	switch {
	case !ok:
		p.log.Warn().Str("agent", lk.agent).Uint64("conn", m.ID).Msg("connection hand-off: the agent handed back a connection it did not hold; closed")
		if c != nil {
			_ = c.Close()
		}
	case err != nil:
		p.log.Warn().Err(err).Str("agent", lk.agent).Msg("connection hand-off: unusable socket handed back")
		p.release(m.ID, lk)
	default:
		p.serveAgain(c, m.ID, m.Data, false)
	}
}

// release frees the place of connection id, closed while owner held it.
func (p *connPass) release(id uint64, owner *passLink) {
	p.mu.Lock()
	h := p.held[id]
	if h == nil || h.owner != owner {
		p.mu.Unlock()
		return
	}
	delete(p.held, id)
	p.mu.Unlock()
	_ = h.slot.Close()
}

// releaseAll frees the places of the connections lk's process held: it
// ended, and they with it.
func (p *connPass) releaseAll(lk *passLink) {
	var slots []net.Conn
	p.mu.Lock()
	for id, h := range p.held {
		if h.owner == lk {
			slots = append(slots, h.slot)
			delete(p.held, id)
		}
	}
	p.mu.Unlock()
	for _, s := range slots {
		_ = s.Close()
	}
}
