package mcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// terminateAfter is how long a server has to exit after its stdin closed,
// and again after it was asked to terminate, before it is killed.
const terminateAfter = 2 * time.Second

// stdioConn speaks to a child process over its stdin and stdout: one
// message per line.
//
// Both pipes are the process's own os.Pipe ends rather than exec.Cmd's
// StdinPipe and StdoutPipe: a write then honours the caller's deadline (a
// server that stops reading cannot block a tick), and Wait does not close
// stdout under the reader (which exec documents as wrong).
type stdioConn struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File

	wmu    sync.Mutex
	exited chan struct{} // closed when Wait returned
	read   chan struct{} // closed when the reader ended
}

// startStdio starts cmd and its reader, which hands every line to s.
func startStdio(cmd *exec.Cmd, s *session) (*stdioConn, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	// Stderr is copied by exec: a process the server started may hold it
	// open, and Wait would wait for it for ever.
	cmd.WaitDelay = terminateAfter
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	c := &stdioConn{cmd: cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), read: make(chan struct{})}
	go c.readLoop(s)
	go func() {
		_ = cmd.Wait()
		close(c.exited)
		// A process the server started may hold its output open after
		// the server exited: its calls would wait for their timeouts.
		select {
		case <-c.read:
		case <-time.After(terminateAfter):
			s.end(errors.New("the MCP server exited (a process it started still holds its output)"))
			_ = c.stdout.Close()
		}
	}()
	return c, nil
}

func (c *stdioConn) readLoop(s *session) {
	defer close(c.read)
	sc := bufio.NewScanner(c.stdout)
	sc.Buffer(make([]byte, 0, 64<<10), maxMessage)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		msgs, err := decodeMessages(sc.Bytes())
		if err != nil {
			s.end(fmt.Errorf("MCP server: %w", err))
			return
		}
		for _, m := range msgs {
			s.deliver(m)
		}
	}
	if err := sc.Err(); err != nil {
		s.end(fmt.Errorf("MCP server output: %w", err))
		return
	}
	s.end(errors.New("the MCP server closed its output (exited)"))
}

func (c *stdioConn) send(ctx context.Context, data []byte, _ int64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	deadline, _ := ctx.Deadline() // zero: no deadline
	if err := c.stdin.SetWriteDeadline(deadline); err != nil {
		return err
	}
	if _, err := c.stdin.Write(append(data, '\n')); err != nil {
		select {
		case <-c.read: // the server had closed its output: it is gone
			return fmt.Errorf("%w: write to the MCP server: %w", errNotDelivered, err)
		default:
		}
		if errors.Is(err, syscall.EPIPE) {
			return fmt.Errorf("%w: write to the MCP server: %w", errNotDelivered, err)
		}
		return fmt.Errorf("write to the MCP server: %w", err)
	}
	return nil
}

// close closes the server's stdin, which tells it to exit; a server still
// running terminateAfter later is asked to terminate, then killed.
func (c *stdioConn) close() error {
	c.wmu.Lock()
	err := c.stdin.Close()
	c.wmu.Unlock()
	select {
	case <-c.exited:
	case <-time.After(terminateAfter):
		if c.cmd.Process.Signal(syscall.SIGTERM) != nil { // Windows has no SIGTERM
			_ = c.cmd.Process.Kill()
		}
		select {
		case <-c.exited:
		case <-time.After(terminateAfter):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	// A process the server started may still hold its stdout open.
	_ = c.stdout.Close()
	<-c.read
	return err
}
