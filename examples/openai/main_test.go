package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// server is a chat-completions server that answers with a fixed status and body and keeps
// what it was sent.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
	body []map[string]any
}

func newServer(t *testing.T, status int, body string) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		s.mu.Lock()
		s.auth, s.body = append(s.auth, r.Header.Get("Authorization")), append(s.body, req)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

const answer = `{"id":"chatcmpl-1","object":"chat.completion","created":1764478800,"model":"m",
	"choices":[{"index":0,"message":{"role":"assistant","content":"Rayleigh scattering."},"finish_reason":"stop"}],
	"usage":{"prompt_tokens":20,"completion_tokens":3,"total_tokens":23}}`

// env returns a getenv over a map.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// runWith runs the program and returns its stdout and stderr.
func runWith(t *testing.T, args []string, vars map[string]string, stdin string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, env(vars), strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestRunFlags(t *testing.T) {
	t.Parallel()
	s := newServer(t, http.StatusOK, answer)
	out, _, err := runWith(t, []string{"-base-url", s.URL + "/v1", "-model", "m", "-key", "sk-flag", "-system", "Be brief.", "Why", "is", "the", "sky", "blue?"},
		map[string]string{"OPENAI_API_KEY": "sk-env", "OPENAI_MODEL": "env-model"}, "")
	require.NoError(t, err)
	require.Equal(t, "Rayleigh scattering.\n", out)

	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []string{"Bearer sk-flag"}, s.auth, "flags win over the environment")
	require.Equal(t, "m", s.body[0]["model"])
	msgs, _ := json.Marshal(s.body[0]["messages"])
	require.JSONEq(t, `[{"role":"system","content":"Be brief."},{"role":"user","content":"Why is the sky blue?"}]`, string(msgs))
}

func TestRunEnvironmentAndStdin(t *testing.T) {
	t.Parallel()
	s := newServer(t, http.StatusOK, answer)
	out, _, err := runWith(t, nil, map[string]string{
		"OPENAI_BASE_URL": s.URL + "/v1", "OPENAI_MODEL": "env-model", "OPENAI_API_KEY": "sk-env",
	}, "Why is the sky blue?\n")
	require.NoError(t, err)
	require.Equal(t, "Rayleigh scattering.\n", out)

	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []string{"Bearer sk-env"}, s.auth)
	require.Equal(t, "env-model", s.body[0]["model"])
}

func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now

	_, _, err = runWith(t, []string{"-base-url", "http://" + addr + "/v1", "-text", "hello"}, nil, "")
	require.Error(t, err)
	require.False(t, errors.Is(err, errUsage))
	require.ErrorContains(t, err, "cannot reach the model server at http://"+addr+"/v1")
	require.ErrorContains(t, err, "ollama serve")
}

func TestRunServerErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		body   string
		want   string
	}{
		{http.StatusNotFound, `{"error":{"message":"model \"llama3.2\" not found, try pulling it first","type":"api_error"}}`, `does not know model "llama3.2"`},
		{http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, "refused the API key"},
		{http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached","type":"requests"}}`, "rate limited"},
		{http.StatusInternalServerError, `{"error":{"message":"boom","type":"server_error"}}`, "answered HTTP 500"},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			s := newServer(t, tc.status, tc.body)
			_, _, err := runWith(t, []string{"-base-url", s.URL + "/v1", "-text", "hello"}, nil, "")
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	_, _, err := runWith(t, []string{"-base-url", "http://127.0.0.1:1/v1"}, nil, "  \n")
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "no text")

	_, _, err = runWith(t, []string{"-nope"}, nil, "")
	require.ErrorIs(t, err, errUsage)

	_, _, err = runWith(t, []string{"-base-url", "localhost:11434", "-text", "hi"}, nil, "")
	require.ErrorIs(t, err, errUsage)
	require.ErrorContains(t, err, "BaseURL")

	_, stderr, err := runWith(t, []string{"-help"}, map[string]string{"OPENAI_API_KEY": "sk-secret"}, "")
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, stderr, "-base-url")
	require.NotContains(t, stderr, "sk-secret")
}
