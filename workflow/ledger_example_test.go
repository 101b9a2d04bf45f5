package workflow_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/IBM/sarama"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"
	_ "modernc.org/sqlite"

	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/workflow"
)

// Bridge.Submit gives a caller the answer synchronously: here an HTTP front door that runs
// each message as a turn of its conversation's workflow and replies with the Result. It needs
// a Temporal server and workers (see the package example), so it is not run here.
func ExampleBridge_Submit() {
	c, err := client.Dial(client.Options{
		HostPort:           "temporal:7233",
		ContextPropagators: []twf.ContextPropagator{workflow.NewContextPropagator()},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	bridge, err := workflow.NewBridge(c, workflow.BridgeOptions{TaskQueue: "turnstile"})
	if err != nil {
		log.Fatal(err)
	}

	http.HandleFunc("POST /conversations/{id}/messages", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Text string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := turn.Request{
			Schema: turn.SchemaVersion,
			// A UUID from the client: a retried POST attaches to the same update and never runs
			// the model twice.
			ID:             r.Header.Get("Idempotency-Key"),
			ConversationID: r.PathValue("id"),
			UserID:         r.Header.Get("X-Authenticated-User"), // from the auth proxy, never the body (G7)
			Text:           body.Text,
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		ctx = workflow.WithHeaders(ctx, map[string]string{"traceparent": r.Header.Get("traceparent")})

		res, err := bridge.Submit(ctx, req)
		var appErr *temporal.ApplicationError
		switch {
		case errors.As(err, &appErr) && appErr.Type() == workflow.ErrDeadLettered:
			http.Error(w, appErr.Message(), http.StatusUnprocessableEntity)
		case turn.Classify(err) == turn.KindPermanent: // an invalid request
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(res)
		}
	})
	log.Fatal(http.ListenAndServe(":8080", nil))
}

// The ledger records what the bridge handed off, by conversation and sequence, so that
// Bridge.Reconcile can re-send a gap a workflow never applied. The first envelope of a
// sequence is kept; requests without a sequence have no gap to find and are not recorded.
func ExampleMemoryLedger() {
	ctx := context.Background()
	var ledger workflow.MemoryLedger // in production: a SQLLedger, shared by every member
	env := func(seq int64, text string) workflow.Envelope {
		return workflow.Envelope{Request: turn.Request{ConversationID: "c-7731", Sequence: seq, Text: text}}
	}
	if err := ledger.Record(ctx, env(1, "hi"), env(2, "where is my refund?"), env(4, "hello?"), env(0, "unsequenced")); err != nil {
		log.Fatal(err)
	}
	if err := ledger.Record(ctx, env(2, "a retried hand-off")); err != nil {
		log.Fatal(err)
	}
	high, err := ledger.HighWater(ctx, "c-7731")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("high-water mark", high)
	envs, err := ledger.Range(ctx, "c-7731", 2, high) // what a workflow that applied 1 is missing
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range envs {
		fmt.Println(e.Request.Sequence, e.Request.Text)
	}
	// Output:
	// high-water mark 4
	// 2 where is my refund?
	// 4 hello?
}

// A SQLLedger on SQLite (or PostgreSQL) next to the stores: the durable ledger, and the
// StateStore in which a conversation's idle run leaves its sequence mark for the next run.
func ExampleSQLLedger() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example-ledger?mode=memory&cache=shared&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one connection keeps the in-memory database alive
	ledger, err := workflow.NewSQLLedger(db, workflow.SQLite, "")
	if err != nil {
		log.Fatal(err)
	}
	if err := ledger.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	_, found, err := ledger.LoadState(ctx, "c-7731")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found", found)
	err = ledger.SaveState(ctx, workflow.State{ConversationID: "c-7731", NextSequence: 3, Applied: 2,
		Recent: []string{"6f1b7c1e-2d8f-4a53-9c1e-0f6f3a3c2b10", "0b9c4f4e-8a1d-4c55-9d7e-1f2a3b4c5d6e"}})
	if err != nil {
		log.Fatal(err)
	}
	st, found, err := ledger.LoadState(ctx, "c-7731")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("found", found, "next sequence", st.NextSequence, "applied", st.Applied, "recent", len(st.Recent))
	// Output:
	// found false
	// found true next sequence 3 applied 2 recent 2
}

// A HeaderTap keeps the headers the bridge carries into Temporal from each record the
// consumer reads (Config.Sarama.Consumer.Interceptors); the bridge takes them by the
// request's Source.
func ExampleHeaderTap() {
	tap := workflow.NewHeaderTap(0) // DefaultHeaders: traceparent, tracestate, tenant
	tap.OnConsume(&sarama.ConsumerMessage{Topic: "agent.requests", Partition: 3, Offset: 41,
		Headers: []*sarama.RecordHeader{
			{Key: []byte("tenant"), Value: []byte("acme")},
			{Key: []byte("traceparent"), Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Key: []byte("x-debug"), Value: []byte("1")}, // not a carried header: not kept
		}})
	h := tap.Take(turn.Source{Topic: "agent.requests", Partition: 3, Offset: 41}, workflow.DefaultHeaders)
	fmt.Println(len(h), h["tenant"], h["traceparent"])
	fmt.Println(tap.Take(turn.Source{Topic: "agent.requests", Partition: 3, Offset: 42}, workflow.DefaultHeaders))
	// Output:
	// 2 acme 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// map[]
}
