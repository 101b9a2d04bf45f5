package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
)

// demoModel stands in for an LLM: deterministic, and its answer depends on the session, so a
// turn that ran without its conversation's context, out of order or twice gives a different
// answer than expected.
type demoModel struct {
	delay time.Duration // how long each turn "thinks"
	calls atomic.Int64
}

// Respond answers with the turn's number in its conversation and the user's previous message.
func (m *demoModel) Respond(ctx context.Context, in turn.Input) (turn.Output, error) {
	m.calls.Add(1)
	if m.delay > 0 {
		select {
		case <-time.After(m.delay):
		case <-ctx.Done():
			return turn.Output{}, context.Cause(ctx)
		}
	}
	prev := ""
	for i := len(in.Session.Events) - 1; i >= 0; i-- {
		if in.Session.Events[i].Author == "user" {
			prev = in.Session.Events[i].Text
			break
		}
	}
	text := reply(in.Request.ConversationID, in.Session.Version+1, prev)
	return turn.Output{Events: []session.Event{{Author: "assistant", Text: text}}}, nil
}

// reply is the demo model's answer to the n-th turn of conv whose previous user message was
// prev; the checks rebuild it from what was produced.
func reply(conv string, n int64, prev string) string {
	if prev == "" {
		return fmt.Sprintf("turn %d of %s; nothing said before", n, conv)
	}
	return fmt.Sprintf("turn %d of %s; you said before: %q", n, conv, prev)
}

// workload is what the producer sends: requests of many conversations, interleaved, each
// conversation's in its own order.
type workload struct {
	order  []turn.Request            // produce order
	byConv map[string][]turn.Request // each conversation's requests, in its order
	convs  []string
}

var phrases = []string{
	"where is my order?", "can I change the delivery address?", "the parcel arrived damaged",
	"please cancel the second item", "do you ship to Norway?", "I was charged twice",
	"what is your return policy?", "the tracking link does not work", "thanks, that helped",
	"can I pay by invoice?", "the size is wrong, can I swap it?", "is the blue one back in stock?",
}

// newWorkload spreads requests evenly over conversations and interleaves them the way many
// users writing at once would: each next request comes from a random conversation that has
// messages left. Ids carry runID, so runs on a persistent database or cluster never meet.
func newWorkload(runID string, requests, conversations int) *workload {
	wl := &workload{byConv: make(map[string][]turn.Request, conversations)}
	left := make([]int, conversations)
	for i := range conversations {
		wl.convs = append(wl.convs, fmt.Sprintf("qs-%s-c%03d", runID, i+1))
		left[i] = requests / conversations
		if i < requests%conversations {
			left[i]++
		}
	}
	rng := rand.New(rand.NewPCG(1, 2)) // the same interleaving every run
	active := make([]int, conversations)
	for i := range active {
		active[i] = i
	}
	now := time.Now().UTC()
	for len(active) > 0 {
		k := rng.IntN(len(active))
		c := active[k]
		conv := wl.convs[c]
		n := len(wl.byConv[conv]) + 1
		req := turn.Request{
			Schema:         turn.SchemaVersion,
			ID:             uuid.NewString(),
			ConversationID: conv,
			UserID:         fmt.Sprintf("user-%03d", c+1),
			Sequence:       int64(n),
			Text:           fmt.Sprintf("message %d of %s: %s", n, conv, phrases[(c+n)%len(phrases)]),
			CreatedAt:      now,
		}
		wl.order = append(wl.order, req)
		wl.byConv[conv] = append(wl.byConv[conv], req)
		if left[c]--; left[c] == 0 {
			active[k] = active[len(active)-1]
			active = active[:len(active)-1]
		}
	}
	return wl
}
