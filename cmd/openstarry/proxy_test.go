package main

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestMQTTThroughProxy: with ALL_PROXY set, the agent reaches its hub
// through that SOCKS5 proxy, as paho's own dialler would, and tasks and
// results flow.
func TestMQTTThroughProxy(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	var tunnels atomic.Int64
	addr := socks5(t, &tunnels)
	col := mqtttest.Collect(t, m.URL(), "observer-proxy", true, resultsTopic("px"))
	c := startChildEnv(t, []string{"ALL_PROXY=socks5://" + addr, "NO_PROXY="},
		"run", "--agent", "px", "--device", mqttDevice, "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--broker", m.URL())
	c.waitLog("subscribed to "+tasksTopic("px"), 20*time.Second)
	if tunnels.Load() == 0 {
		t.Fatal("the agent connected without the proxy")
	}
	mqtttest.Publish(t, mqttPublisher(t, m.URL()), tasksTopic("px"), mqttTask("via-proxy", "through"))
	wait.For(t, 10*time.Second, "the result", func() bool {
		return len(mqtttest.Results(t, col, resultsTopic("px"))["via-proxy"]) > 0
	})
}

// socks5 serves a minimal SOCKS5 proxy (no authentication, CONNECT to an
// IPv4 address or a name) on loopback, counting the tunnels it opens.
func socks5(t *testing.T, tunnels *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				target, err := socks5Handshake(conn)
				if err != nil {
					return
				}
				up, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					conn.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				defer up.Close()
				tunnels.Add(1)
				conn.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
				go io.Copy(up, conn)
				io.Copy(conn, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// socks5Handshake reads the greeting and the CONNECT request and returns
// the target address.
func socks5Handshake(c net.Conn) (string, error) {
	buf := make([]byte, 262)
	if _, err := io.ReadFull(c, buf[:2]); err != nil {
		return "", err
	}
	if _, err := io.ReadFull(c, buf[:buf[1]]); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return "", err
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil {
		return "", err
	}
	var host string
	switch buf[3] {
	case 1:
		if _, err := io.ReadFull(c, buf[:4]); err != nil {
			return "", err
		}
		host = net.IP(buf[:4]).String()
	case 3:
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return "", err
		}
		n := int(buf[0])
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return "", err
		}
		host = string(buf[:n])
	default:
		return "", io.ErrUnexpectedEOF
	}
	if _, err := io.ReadFull(c, buf[:2]); err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(buf[:2])))), nil
}
