// Command openai runs one turnstile turn against an OpenAI-compatible chat-completions server
// (Ollama by default; vLLM, the llama.cpp server and OpenAI work the same way) and prints the
// answer. It wires turn/chatcompletion into a turn.Runner with in-memory stores: the same
// Runner the Kafka consumer drives, minus Kafka.
//
//	ollama pull llama3.2 && ollama serve &
//	go run ./examples/openai "Why is the sky blue?"
//	echo "Why is the sky blue?" | go run ./examples/openai
//	OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_MODEL=gpt-4o-mini OPENAI_API_KEY=sk-... \
//	    go run ./examples/openai -text "Why is the sky blue?"
//
// Flags override the environment: -base-url (OPENAI_BASE_URL, default
// http://localhost:11434/v1), -model (OPENAI_MODEL, default llama3.2), -key (OPENAI_API_KEY,
// default none). The text is -text, else the arguments, else stdin. It exits 1 with a short
// explanation when the turn fails (server unreachable, model unknown, key refused, rate
// limited), 2 on bad flags.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/openai/openai-go/v3"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// defaultModel is a small model Ollama serves after `ollama pull llama3.2`.
const defaultModel = "llama3.2"

// errUsage marks a bad command line; main exits 2 for it.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var stdin io.Reader = os.Stdin
	if fi, err := os.Stdin.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		stdin = nil // a terminal: do not wait for typing, ask for -text instead
	}
	err := run(ctx, os.Args[1:], os.Getenv, stdin, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "openai:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "openai:", err)
		os.Exit(1)
	}
}

// options is the parsed command line and environment.
type options struct {
	baseURL, model, key, system, text string
	timeout                           time.Duration
}

// run is the whole program with its dependencies passed in, so that a test can run it against
// an httptest server with its own environment and streams. A nil stdin is never read.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	opts, err := parse(args, getenv, stdin, stderr)
	if err != nil {
		return err
	}
	model, err := chatcompletion.New(chatcompletion.Config{
		BaseURL: opts.baseURL, APIKey: opts.key, Model: opts.model, SystemPrompt: opts.system,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	runner := &turn.Runner{
		Model:       model,
		Sessions:    session.NewMemoryStore(),
		Inbox:       inbox.NewMemoryInbox(),
		App:         "examples-openai",
		TurnTimeout: opts.timeout,
		Logger:      slog.New(slog.DiscardHandler), // run explains failures itself
	}
	req := turn.Request{
		Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: "cli", UserID: "cli",
		Text: opts.text, CreatedAt: time.Now().UTC(),
	}
	res, err := runner.Run(ctx, req)
	if err != nil {
		return explain(err, opts)
	}
	_, err = fmt.Fprintln(stdout, res.Text)
	return err
}

// parse reads the flags, falling back to the environment, and the text.
func parse(args []string, getenv func(string) string, stdin io.Reader, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("openai", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: openai [flags] [text...]   (text from -text, the arguments, or stdin)")
		fs.PrintDefaults()
	}
	var o options
	// Defaults are resolved after parsing so that -help never prints the API key.
	fs.StringVar(&o.baseURL, "base-url", "", "API root before /chat/completions (default $OPENAI_BASE_URL, else "+chatcompletion.OllamaBaseURL+")")
	fs.StringVar(&o.model, "model", "", "model name (default $OPENAI_MODEL, else "+defaultModel+")")
	fs.StringVar(&o.key, "key", "", "API key (default $OPENAI_API_KEY; Ollama needs none)")
	fs.StringVar(&o.system, "system", "You are a helpful assistant. Answer briefly.", "system prompt")
	fs.StringVar(&o.text, "text", "", "the user's message")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "whole-turn deadline")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", errUsage, err)
	}
	o.baseURL = first(o.baseURL, getenv("OPENAI_BASE_URL"), chatcompletion.OllamaBaseURL)
	o.model = first(o.model, getenv("OPENAI_MODEL"), defaultModel)
	o.key = first(o.key, getenv("OPENAI_API_KEY"))
	if o.text == "" {
		o.text = strings.Join(fs.Args(), " ")
	}
	if o.text == "" && stdin != nil {
		data, err := io.ReadAll(io.LimitReader(bufio.NewReader(stdin), turn.DefaultMaxTextBytes+1))
		if err != nil {
			return o, fmt.Errorf("read stdin: %w", err)
		}
		o.text = string(data)
	}
	if o.text = strings.TrimSpace(o.text); o.text == "" {
		return o, fmt.Errorf("%w: no text: pass -text, arguments, or pipe it to stdin", errUsage)
	}
	return o, nil
}

// first returns the first non-empty value.
func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// explain turns a failed turn into one message a person can act on, keeping the cause.
func explain(err error, o options) error {
	var (
		apiErr *openai.Error
		urlErr *url.Error
		decErr *turn.DecodeError
	)
	switch {
	case errors.As(err, &decErr):
		return fmt.Errorf("%w: %w", errUsage, decErr)
	case turn.Classify(err) == turn.KindAbandoned:
		return errors.New("interrupted")
	case errors.Is(err, turn.ErrTurnTimeout):
		return fmt.Errorf("no answer from %s within %s (raise -timeout): %w", o.baseURL, o.timeout, err)
	case errors.As(err, &apiErr):
		return explainStatus(apiErr, o, err)
	case errors.As(err, &urlErr):
		return fmt.Errorf("cannot reach the model server at %s: %w\n"+
			"Is it running? For Ollama: `ollama serve`, then `ollama pull %s`. Elsewhere: set -base-url or OPENAI_BASE_URL",
			o.baseURL, urlErr.Err, o.model)
	}
	return fmt.Errorf("the turn failed: %w", err)
}

// explainStatus explains an HTTP error status.
func explainStatus(apiErr *openai.Error, o options, err error) error {
	switch apiErr.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("the server at %s refused the API key (set -key or OPENAI_API_KEY): %w", o.baseURL, err)
	case http.StatusNotFound:
		return fmt.Errorf("the server at %s does not know model %q or the chat-completions endpoint "+
			"(check -model and -base-url; for Ollama, `ollama pull %s`): %w", o.baseURL, o.model, o.model, err)
	case http.StatusTooManyRequests:
		d, _ := turn.RetryDelay(err)
		return fmt.Errorf("rate limited by the server at %s; try again in %s: %w", o.baseURL, d, err)
	}
	return fmt.Errorf("the server at %s answered HTTP %d: %w", o.baseURL, apiErr.StatusCode, err)
}
