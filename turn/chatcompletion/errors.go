package chatcompletion

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/internal/modelhttp"
)

// mapError turns the SDK's error of one request into one turnstile's Classify understands.
// ctx is the caller's context; raw is the HTTP response, when one arrived.
func (c *Client) mapError(ctx context.Context, err error, raw *http.Response) error {
	if mapped, ended := modelhttp.ContextEnded(ctx, err, ErrTimeout, c.cfg.Model); ended {
		return mapped // the caller's end (abandoned), or Config.Timeout's (a failed attempt)
	}

	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		if raw == nil || raw.StatusCode < 400 {
			err = fmt.Errorf("chatcompletion: model %s: %w", c.cfg.Model, err)
			if modelhttp.NotSent(err) { // the server is down or unknown: the request cannot be at fault
				return turn.Unavailable(err)
			}
			return err
		}
		// The SDK could not decode the error body (Ollama's native {"error":"..."}, say) and
		// returned the decoding error; build the *openai.Error it would have returned, so
		// that callers see one error type for every HTTP status.
		apiErr = &openai.Error{StatusCode: raw.StatusCode, Request: raw.Request, Response: raw, Message: modelhttp.BodyMessage(raw)}
		err = apiErr
	}
	resp := apiErr.Response
	if resp == nil { // not from the SDK's HTTP path; nothing more to read
		resp = &http.Response{StatusCode: apiErr.StatusCode, Header: http.Header{}}
	}
	msg := serverMessage(apiErr, resp)
	err = fmt.Errorf("chatcompletion: model %s: %w%s", c.cfg.Model, err, msg)
	switch status := apiErr.StatusCode; {
	case status == http.StatusTooManyRequests && tooLargeForLimit(msg):
		// "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested
		// 42000": the request alone is over the per-minute limit, so no wait lets it through.
		return turn.Permanent(err)
	case status == http.StatusTooManyRequests && quotaExhausted(apiErr):
		// "You exceeded your current quota": no wait restores it either; the attempts run
		// out and the request is dead-lettered, to be re-driven once billing is sorted.
		return err
	case status == http.StatusTooManyRequests:
		return turn.RetryAfter(RetryAfter(resp.Header, time.Now()), err)
	case status == http.StatusServiceUnavailable:
		// Overloaded or in maintenance (RFC 9110 section 15.6.4): a pause when the server
		// says how long, else a retry after a backoff; no attempt spent either way.
		if d := RetryAfter(resp.Header, time.Now()); d > 0 {
			return turn.RetryAfter(d, err)
		}
		return turn.Unavailable(err)
	case status == http.StatusRequestTimeout, status == http.StatusConflict:
		return err
	case status >= 400 && status < 500:
		if strings.EqualFold(resp.Header.Get("X-Should-Retry"), "true") {
			return err
		}
		return turn.Permanent(err)
	}
	return err
}

// tooLargeForLimit reports a 429 whose message says the request by itself exceeds a
// per-minute limit (OpenAI's "Request too large for MODEL ... on tokens per min (TPM)";
// Azure OpenAI and other compatible servers quote the same text).
func tooLargeForLimit(msg string) bool {
	return strings.Contains(strings.ToLower(msg), "request too large")
}

// quotaExhausted reports OpenAI's 429 for a spent quota (type or code "insufficient_quota").
func quotaExhausted(apiErr *openai.Error) bool {
	return apiErr.Type == "insufficient_quota" || apiErr.Code == "insufficient_quota"
}

// serverMessage returns ": message" with the server's explanation of an error response,
// bounded, or "". The SDK's *openai.Error prints only the status, and finds the message only
// in OpenAI's {"error":{"message":...}} shape; other servers put it elsewhere.
func serverMessage(apiErr *openai.Error, resp *http.Response) string {
	msg := ""
	if apiErr != nil {
		msg = apiErr.Message
	}
	if strings.TrimSpace(msg) == "" {
		msg = modelhttp.BodyMessage(resp)
	}
	return modelhttp.Quote(msg)
}

// RetryAfter returns how long a 429 (or 503) response asks the client to wait, from its
// headers, measured from now; 0 when it names no delay or a time already past.
//
// It reads "retry-after-ms" first (milliseconds, a decimal number; OpenAI and its SDKs use it
// for sub-second limits), then "Retry-After" (RFC 9110, section 10.2.3): either delay-seconds
// (a decimal integer; a fraction is accepted too) or an HTTP-date in any of the three formats
// RFC 9110 section 5.6.7 lets a recipient parse. Malformed or negative values are ignored.
// A delay too large for a time.Duration saturates at the largest one.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	return modelhttp.RetryAfter(h, now)
}
