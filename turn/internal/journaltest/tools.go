package journaltest

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/session"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
)

// OrderArgs are the arguments of Tools' lookup and refund tools.
type OrderArgs struct {
	Order string `json:"order" jsonschema:"description=the order id"`
}

// MailArgs are the arguments of Tools' deferred notify tool.
type MailArgs struct {
	To string `json:"to"`
}

// Tools is the tool set of the clients' scenario tests: "lookup" answers "order O shipped",
// "refund" answers "refunded O", "notify" is deferred. Each call's key is kept by tool name;
// Fail, when set, gives a call's error (n is the tool's 1-based call count).
type Tools struct {
	Fail func(name string, n int) error

	mu   sync.Mutex
	keys map[string][]string
}

// List returns the tools.
func (k *Tools) List() []agent.Tool {
	regular := func(name, answer string) agent.Tool {
		return agent.NewTool(name, name+"s an order", func(_ context.Context, c agent.Call, a OrderArgs) (string, error) {
			if err := k.record(name, c.Key); err != nil {
				return "", err
			}
			return answer + " " + a.Order, nil
		})
	}
	return []agent.Tool{
		regular("lookup", "shipped"),
		regular("refund", "refunded"),
		agent.NewDeferred("notify", "emails the customer", func(_ context.Context, key string, _ MailArgs) error {
			return k.record("notify", key)
		}),
	}
}

func (k *Tools) record(name, key string) error {
	k.mu.Lock()
	if k.keys == nil {
		k.keys = map[string][]string{}
	}
	k.keys[name] = append(k.keys[name], key)
	n := len(k.keys[name])
	k.mu.Unlock()
	if k.Fail != nil {
		return k.Fail(name, n)
	}
	return nil
}

// Keys returns the keys of the tool's calls, in call order.
func (k *Tools) Keys(name string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys[name]...)
}

// Runner returns a Runner of model over the stores.
func Runner(model turn.ModelClient, ib inbox.Inbox, store session.Store) *turn.Runner {
	return &turn.Runner{Model: model, Sessions: store, Inbox: ib, TurnTimeout: 20 * time.Second}
}

// Request returns a request of text in conversation conv of user u-1.
func Request(conv, text string) turn.Request {
	return turn.Request{Schema: turn.SchemaVersion, ID: uuid.NewString(), ConversationID: conv, UserID: "u-1", Text: text}
}
