package turntest_test

import (
	"fmt"
	"sync"
	"testing"
)

// fakeT records a helper's failure instead of failing the test, so a test
// can check that bad input fails cleanly (no panic). Use run: Fatalf ends the
// goroutine it runs on.
type fakeT struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	msg     string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(fakeExit{})
}

func (f *fakeT) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(fakeExit{})
}

type fakeExit struct{}

func (f *fakeT) run(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fakeExit); !ok {
				panic(r)
			}
		}
	}()
	fn()
}
