package chatcompletion_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

func outageInput() turn.Input {
	return turn.Input{Request: turn.Request{ID: "0b9c6f55-8a1e-4c56-9a7c-3f1f3d1f2a10", ConversationID: "c", UserID: "u", Text: "hi"}}
}

// The model server is down (restart, deploy, crash): connection refused, so the request was
// never sent. A failed attempt here would dead-letter every record that reaches a member during
// a few seconds of outage; it is KindUnavailable instead.
func TestServerDownIsNotAnAttempt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := chatcompletion.New(chatcompletion.Config{BaseURL: "http://" + addr + "/v1", Model: "m"})
	require.NoError(t, err)
	_, err = c.Respond(context.Background(), outageInput())
	require.Error(t, err)
	t.Logf("error: %v", err)
	require.Equal(t, turn.KindUnavailable, turn.Classify(err), "connection refused: %v", err)
}

// vLLM and gateways answer 503 with Retry-After when overloaded: a pause for that long, no
// attempt spent. Without the header, a retry after a backoff, no attempt spent.
func TestOverloaded503IsNotAnAttempt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"server overloaded, retry later"}}`))
	}))
	defer srv.Close()
	c, err := chatcompletion.New(chatcompletion.Config{BaseURL: srv.URL + "/v1", Model: "m"})
	require.NoError(t, err)
	_, err = c.Respond(context.Background(), outageInput())
	require.Error(t, err)
	t.Logf("error: %v", err)
	require.Equal(t, turn.KindRateLimited, turn.Classify(err), "503 with Retry-After: %v", err)
	d, ok := turn.RetryDelay(err)
	require.True(t, ok)
	require.Equal(t, 5*time.Second, d)

	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer bare.Close()
	c, err = chatcompletion.New(chatcompletion.Config{BaseURL: bare.URL + "/v1", Model: "m"})
	require.NoError(t, err)
	_, err = c.Respond(context.Background(), outageInput())
	require.Equal(t, turn.KindUnavailable, turn.Classify(err), "bare 503: %v", err)
}
