package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrNil is returned by Do for a RESP nil reply (a missing key, say).
var ErrNil = errors.New("testenv: redis nil reply")

// redisDo sends one command on a fresh connection and returns the reply. It
// speaks just enough RESP2 for readiness checks and test assertions, so this
// package needs no Redis client library. Arrays are returned with their
// elements joined by newlines.
func redisDo(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return "", errors.New("testenv: empty RESP line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("testenv: bad bulk length %q", line)
		}
		if n < 0 {
			return "", ErrNil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("testenv: bad array length %q", line)
		}
		if n < 0 {
			return "", ErrNil
		}
		elems := make([]string, 0, n)
		for range n {
			e, err := readReply(r)
			if err != nil && !errors.Is(err, ErrNil) {
				return "", err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("testenv: unexpected RESP reply %q", line)
	}
}
