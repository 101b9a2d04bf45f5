package turn

import (
	"fmt"
	"runtime"
	"strings"
)

// PanicError is a panic recovered in code that ran on a turn's behalf: the model, a store
// method, a consumer.Handler, a TurnContextFunc, a decoder, telemetry. It fails the attempt
// (Classify makes it KindAttempt), so that the turn is retried and, once its attempts run out,
// dead-lettered with the panic in its reason; the process and its other turns go on. A crash
// that no recover can catch (kill -9, out of memory, a fatal runtime error) is crash
// isolation's to attribute (WithCrashIsolation).
type PanicError struct {
	// Where names what panicked, such as "model", "session store", "handler", "decoder".
	Where string
	// Value is the value given to panic.
	Value any
	// Stack is the panicking goroutine's stack from the frame that panicked outwards, at most
	// maxPanicFrames frames, one "function (file:line)" per frame, separated by " < ".
	Stack string
}

// maxPanicFrames bounds PanicError.Stack, so that its text fits a dead letter's headers.
const maxPanicFrames = 8

// Error returns "panic in WHERE: VALUE [at STACK]".
func (e *PanicError) Error() string {
	if e.Stack == "" {
		return fmt.Sprintf("panic in %s: %v", e.Where, e.Value)
	}
	return fmt.Sprintf("panic in %s: %v [at %s]", e.Where, e.Value, e.Stack)
}

// Recovered returns the *PanicError of v, the value recover returned, with the trimmed stack
// of the panic. Call it in the deferred function that recovered, so that the stack is the
// panicking goroutine's:
//
//	defer func() {
//		if v := recover(); v != nil {
//			err = turn.Recovered("handler", v)
//		}
//	}()
func Recovered(where string, v any) *PanicError {
	return &PanicError{Where: where, Value: v, Stack: panicStack(3)}
}

// panicStack returns the frames of the calling goroutine below the runtime's panic frames
// (all of them, when it is not panicking), skipping skip frames first (runtime.Callers,
// panicStack, its caller...).
func panicStack(skip int) string {
	pcs := make([]uintptr, 64)
	pcs = pcs[:runtime.Callers(skip, pcs)]
	frames := runtime.CallersFrames(pcs)
	var (
		b strings.Builder
		n int
	)
	var all []runtime.Frame
	start := 0 // after the outermost runtime.gopanic: a panic raised again in a deferred call
	// (to name its origin, or to release a lock) keeps the first panic's frames below it
	for {
		f, more := frames.Next()
		all = append(all, f)
		if f.Function == "runtime.gopanic" {
			start = len(all)
		}
		if !more {
			break
		}
	}
	for _, f := range all[start:] {
		if strings.HasPrefix(f.Function, "runtime.") {
			continue // runtime.panicmem, runtime.sigpanic, runtime.goexit
		}
		if n == maxPanicFrames {
			b.WriteString(" < …")
			break
		}
		if n > 0 {
			b.WriteString(" < ")
		}
		file := f.File
		if i := strings.LastIndexByte(file, '/'); i >= 0 {
			file = file[i+1:]
		}
		fmt.Fprintf(&b, "%s (%s:%d)", f.Function, file, f.Line)
		n++
	}
	return b.String()
}
