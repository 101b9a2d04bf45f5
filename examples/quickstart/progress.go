package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progressLine shows how far the run is. On a terminal it is one line redrawn in place
// (a carriage return and an erase-line escape); anywhere else it is a plain line every few
// seconds, so that logs and CI output stay readable.
type progressLine struct {
	out   io.Writer
	tty   bool
	every time.Duration // how often the caller should call show

	mu        sync.Mutex
	last      string
	lastPrint time.Time
}

func newProgressLine(out io.Writer) *progressLine {
	p := &progressLine{out: out, tty: isTerminal(out), every: 200 * time.Millisecond}
	return p
}

// isTerminal reports whether w is a character device, such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// show displays line: at once on a terminal, else at most every 2 s.
func (p *progressLine) show(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = line
	switch {
	case p.tty:
		fmt.Fprintf(p.out, "\r\033[K%s", line)
	case time.Since(p.lastPrint) >= 2*time.Second:
		fmt.Fprintln(p.out, line)
		p.lastPrint = time.Now()
	}
}

// note prints a line of its own above the progress line.
func (p *progressLine) note(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.out, "\r\033[K%s\n%s", line, p.last)
		return
	}
	fmt.Fprintln(p.out, line)
}

// finish leaves the last progress on its own line.
func (p *progressLine) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.out, "\r\033[K%s\n", p.last)
	} else if p.last != "" {
		fmt.Fprintln(p.out, p.last)
	}
}
