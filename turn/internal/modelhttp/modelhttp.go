// Package modelhttp holds the HTTP helpers turnstile's model clients (turn/chatcompletion,
// turn/anthropic) share to map a server's answer onto turnstile's error kinds: the delay a
// rate-limited response asks for, the server's message in an error body, and whether a
// request reached the server at all.
package modelhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaxMessageBytes bounds the server's error message quoted in an error, which may end up in a
// dead-letter header.
const MaxMessageBytes = 300

// RetryAfter returns how long a 429 (or 503, or Anthropic's 529) response asks the client to
// wait, from its headers, measured from now; 0 when it names no delay or a time already past.
//
// It reads "retry-after-ms" first (milliseconds, a decimal number; OpenAI and its SDKs use it
// for sub-second limits), then "Retry-After" (RFC 9110, section 10.2.3): either delay-seconds
// (a decimal integer; a fraction is accepted too) or an HTTP-date in any of the three formats
// RFC 9110 section 5.6.7 lets a recipient parse. Malformed or negative values are ignored.
// A delay too large for a time.Duration saturates at the largest one.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if d, ok := parseDelay(h.Get("Retry-After-Ms"), time.Millisecond); ok {
		return d
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if d, ok := parseDelay(v, time.Second); ok {
		return d
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// parseDelay parses a non-negative decimal number of units.
func parseDelay(v string, unit time.Duration) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || strings.Trim(v, "0123456789.") != "" {
		return 0, false // not a plain decimal: no signs, exponents, "inf" or hex
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if d := n * float64(unit); d < float64(math.MaxInt64) {
		return time.Duration(d), true
	}
	return time.Duration(math.MaxInt64), true
}

// NotSent reports a failure to reach the server at all (connection refused, no such host), as
// opposed to a failure during the exchange, which the request itself may have caused.
func NotSent(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dnsErr) ||
		(errors.As(err, &opErr) && opErr.Op == "dial")
}

// Quote returns ": msg" with msg's whitespace collapsed and its length bounded by
// MaxMessageBytes, or "" for a blank msg.
func Quote(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if msg == "" {
		return ""
	}
	if len(msg) > MaxMessageBytes {
		msg = strings.ToValidUTF8(msg[:MaxMessageBytes], "") + "..."
	}
	return ": " + msg
}

// BodyMessage finds the message in an error body: {"error":"..."} (Ollama's native errors),
// {"message":"..."} (vLLM), {"error":{"message":...}} (OpenAI's and Anthropic's shape), or a
// text/plain body. The SDK has already read the body into memory; it is put back for the
// caller's own diagnostics.
func BodyMessage(resp *http.Response) string {
	if resp == nil || resp.Body == nil {
		return ""
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(data))
	var body struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(data, &body) == nil {
		var nested struct {
			Message string `json:"message"`
		}
		var flat string
		switch {
		case json.Unmarshal(body.Error, &flat) == nil && flat != "":
			return flat
		case json.Unmarshal(body.Error, &nested) == nil && nested.Message != "":
			return nested.Message
		}
		return body.Message
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/plain" {
		return string(data)
	}
	return ""
}

// ContextEnded maps err, a model request's error, when it is the end of a context, and
// reports whether it was: when the caller's ctx ended, err joined with ctx's error (the caller
// abandoned the turn, whatever the server said); when another context ended (the client's
// Timeout, the HTTP client's), a failed attempt wrapping errTimeout, the package's ErrTimeout,
// with the context error flattened (%v) so that no caller mistakes it for its own.
func ContextEnded(ctx context.Context, err, errTimeout error, model string) (error, bool) {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return err, true
		}
		return fmt.Errorf("%w: %w", ctxErr, err), true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (model %s): %v", errTimeout, model, err), true
	}
	return nil, false
}
