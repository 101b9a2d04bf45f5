package anthropic

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/internal/modelhttp"
)

// StatusOverloaded is the HTTP status of Anthropic's overloaded_error ("API is temporarily
// overloaded", https://docs.anthropic.com/en/api/errors).
const StatusOverloaded = 529

// mapError turns the SDK's error of one request into one turnstile's Classify understands.
// ctx is the caller's context; raw is the HTTP response, when one arrived.
func (c *Client) mapError(ctx context.Context, err error, raw *http.Response) error {
	if mapped, ended := modelhttp.ContextEnded(ctx, err, ErrTimeout, c.cfg.Model); ended {
		return mapped // the caller's end (abandoned), or Config.Timeout's (a failed attempt)
	}
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		if raw == nil || raw.StatusCode < 400 {
			err = fmt.Errorf("anthropic: model %s: %w", c.cfg.Model, err)
			if modelhttp.NotSent(err) { // the server is down or unknown: the request cannot be at fault
				return turn.Unavailable(err)
			}
			return err
		}
		apiErr = &sdk.Error{StatusCode: raw.StatusCode, Request: raw.Request, Response: raw, Message: modelhttp.BodyMessage(raw)}
		err = apiErr
	}
	resp := apiErr.Response
	if resp == nil {
		resp = &http.Response{StatusCode: apiErr.StatusCode, Header: http.Header{}}
	}
	msg := apiErr.Message
	if strings.TrimSpace(msg) == "" {
		msg = modelhttp.BodyMessage(resp)
	}
	err = fmt.Errorf("anthropic: model %s: %w%s", c.cfg.Model, err, modelhttp.Quote(msg))
	switch status := apiErr.StatusCode; {
	case status == http.StatusTooManyRequests, status == StatusOverloaded,
		apiErr.Type() == sdk.ErrorTypeRateLimitError, apiErr.Type() == sdk.ErrorTypeOverloadedError:
		return turn.RetryAfter(modelhttp.RetryAfter(resp.Header, time.Now()), err)
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
