package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a running child process.
type child struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when the process exited; state is set before
	state   *os.ProcessState
}

// exitCode returns the process's exit code, or -1 when a signal ended it. Call after done.
func (c *child) exitCode() int {
	if c.state == nil {
		return -1
	}
	return c.state.ExitCode()
}

// startChild starts cfg.Exe in role a, its stderr (and stdout unless stdout is given)
// appended to DIR/NAME.log.
func startChild(cfg *Config, a childArgs, stdout io.WriteCloser) (*child, error) {
	raw, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, a.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Exe)
	cmd.Env = append(os.Environ(), envChild+"="+string(raw))
	dieWithParent(cmd)
	cmd.Stderr = logf
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", a.Name, err)
	}
	c := &child{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		c.state = cmd.ProcessState
		logf.Close()
		if stdout != nil {
			stdout.Close()
		}
		close(c.done)
	}()
	return c, nil
}

// broker is the broker process and how to restart it on the same port and data.
type broker struct {
	cfg  *Config
	args childArgs
	addr string

	mu  sync.Mutex
	cur *child
}

// start runs a broker process and waits until it listens.
func (b *broker) start(ctx context.Context) error {
	r, w := io.Pipe()
	c, err := startChild(b.cfg, b.args, w)
	if err != nil {
		return err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- addr
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			return fmt.Errorf("broker exited before it listened (see %s.log)", b.args.Name)
		}
		b.addr = addr
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		return errors.New("broker not ready after 60s")
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		return ctx.Err()
	}
	b.mu.Lock()
	b.cur = c
	b.mu.Unlock()
	return nil
}

// stop closes the broker with SIGTERM (kfake saves its state), or kills it after 30 s.
func (b *broker) stop() {
	b.mu.Lock()
	c := b.cur
	b.cur = nil
	b.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// restart stops the broker and starts it again with its data.
func (b *broker) restart(ctx context.Context) error {
	b.stop()
	return b.start(ctx)
}

// intent is what the run meant when it signalled a member.
type intent int

const (
	intentNone intent = iota
	intentKill
	intentTerm
	intentStop
)

// slot is one member of the group: a supervisor that starts the member process and starts it
// again whenever it exits, until the run stops it.
type slot struct {
	cfg  *Config
	args childArgs
	rng  *rand.Rand // the pause before a restart; used by run's goroutine only

	stopCh chan struct{} // closed by stop
	exited chan struct{} // closed when run returned

	mu       sync.Mutex
	cur      *child
	want     intent // the signal sent to cur, if any
	stopping bool

	// Counters, under mu.
	starts, poisonExits, errorExits int
}

// run supervises the slot until stop; it returns the first error of starting a process.
func (s *slot) run(ctx context.Context, logf func(string, ...any)) error {
	defer close(s.exited)
	for {
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			return nil
		}
		c, err := startChild(s.cfg, s.args, nil)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.cur, s.want = c, intentNone
		s.starts++
		s.mu.Unlock()
		<-c.done
		s.mu.Lock()
		want, stopping := s.want, s.stopping
		s.cur = nil
		switch code := c.exitCode(); {
		case want != intentNone:
		case code == exitPoison:
			s.poisonExits++
			logf("member %s crashed on a poison request (exit %d)", s.args.Name, code)
		default:
			s.errorExits++
			logf("member %s exited by itself with %s (see %s.log)", s.args.Name, c.state, s.args.Name)
		}
		s.mu.Unlock()
		if stopping {
			return nil
		}
		// A pause before the restart, as a real orchestrator's backoff would take.
		select {
		case <-time.After(time.Duration(300+s.rng.IntN(1200)) * time.Millisecond):
		case <-s.stopCh:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// signal sends sig to the running member, if one has been up for at least minUp, and says
// whether it did.
func (s *slot) signal(sig syscall.Signal, why intent, minUp time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cur
	if c == nil || s.want != intentNone || time.Since(c.started) < minUp {
		return false
	}
	if why != intentNone {
		s.want = why
	}
	return c.cmd.Process.Signal(sig) == nil
}

// stop ends the supervision: SIGTERM to the member (which drains, commits and leaves), SIGKILL
// after timeout; it returns once run returned.
func (s *slot) stop(timeout time.Duration) {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.stopCh)
	}
	if c := s.cur; c != nil {
		s.want = intentStop
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	select {
	case <-s.exited:
		return
	case <-time.After(timeout):
	}
	s.mu.Lock()
	if c := s.cur; c != nil {
		_ = c.cmd.Process.Kill()
	}
	s.mu.Unlock()
	<-s.exited
}
