//go:build !linux

package connpass

import (
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

func (l *Link) Send(m Message, sock net.Conn) error { return errUnsupported }
func (l *Link) SetWriteDeadline(t time.Time) error  { return errUnsupported }
func (l *Link) Recv() (Message, *os.File, error)    { return Message{}, nil, errUnsupported }
func (l *Link) Close() error                        { return nil }
func FileConn(f *os.File) (net.Conn, error)         { f.Close(); return nil, errUnsupported }
