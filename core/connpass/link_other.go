//go:build !linux

package connpass

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// Supported says this system can pass connections: not here (the daemon
// forwards every request itself).
const Supported = false

var errUnsupported = errors.New("connpass: connection hand-off is supported on Linux only")

// Link is one end of the pair (Linux only).
type Link struct{}

// Pair fails: not supported here.
func Pair() (*Link, *os.File, error) { return nil, nil, errUnsupported }

// Open fails: not supported here.
func Open(fd uintptr) (*Link, error) { return nil, errUnsupported }

// Send fails: not supported here.
func (l *Link) Send(m Message, sock net.Conn) error { return errUnsupported }

// SetWriteDeadline fails: not supported here.
func (l *Link) SetWriteDeadline(t time.Time) error { return errUnsupported }

// Recv fails: not supported here.
func (l *Link) Recv() (Message, *os.File, error) { return Message{}, nil, errUnsupported }

// Close does nothing.
func (l *Link) Close() error { return nil }

// FileConn closes f and fails: not supported here.
func FileConn(f *os.File) (net.Conn, error) { f.Close(); return nil, errUnsupported }

func closeOnExec(int) {}

// FromEnv returns nil: no daemon hands connections over here.
func FromEnv() (*Settings, error) { return nil, nil }

// Serve fails: not supported here.
func Serve(o AgentOptions) (stop func(ctx context.Context), err error) { return nil, errUnsupported }
