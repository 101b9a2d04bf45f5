package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turnstile-go/turnstile/attachment"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// kafkaRecordLimit is Kafka's default limit on a record batch (message.max.bytes), and so on
// any record: 1 MB.
const kafkaRecordLimit = 1_000_000

// produceWatch records, per topic, how many records the broker was asked to store and the
// largest record batch among them: every record is at most as large as its batch.
type produceWatch struct {
	mu       sync.Mutex
	records  map[string]int
	maxBatch map[string]int
}

// watchProduce makes the env's broker report every produce request to the returned watch.
func (e *env) watchProduce() *produceWatch {
	w := &produceWatch{records: map[string]int{}, maxBatch: map[string]int{}}
	fake := e.cluster.Fake()
	fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		pr, ok := req.(*kmsg.ProduceRequest)
		if !ok {
			return nil, nil, false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, topic := range pr.Topics {
			for _, p := range topic.Partitions {
				for raw := p.Records; len(raw) > 0; {
					var b kmsg.RecordBatch
					if err := b.ReadFrom(raw); err != nil {
						w.maxBatch[topic.Topic] = max(w.maxBatch[topic.Topic], len(raw)) // unreadable: count it whole
						break
					}
					size := 12 + int(b.Length) // FirstOffset and Length, then Length bytes
					w.records[topic.Topic] += int(b.NumRecords)
					w.maxBatch[topic.Topic] = max(w.maxBatch[topic.Topic], size)
					raw = raw[min(size, len(raw)):]
				}
			}
		}
		return nil, nil, false
	})
	return w
}

// pageModel is a chat-completions server (the OpenAI protocol that turn/chatcompletion speaks)
// whose model reads the request's attachment through read_attachment: the first page, a
// middle one and the last, one per model call, then answers with the lines it read there.
type pageModel struct {
	t       *testing.T
	id      string
	offsets []int64

	mu    sync.Mutex
	pages []string // the tool outputs the model got, in order
}

var toolHeader = regexp.MustCompile(`^attachment (sha256:[0-9a-f]{64}): bytes (\d+) to (\d+) \((\d+) bytes\) of (\d+), as text; `)

func (m *pageModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	data, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(data, &req); err != nil || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, fmt.Sprintf("bad request %s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	var pages []string
	for _, msg := range req.Messages {
		var text string
		_ = json.Unmarshal(msg.Content, &text)
		switch msg.Role {
		case "user":
			pages = nil
			if !strings.Contains(text, m.id) {
				m.t.Errorf("the user's message does not name the attachment %s:\n%.2000s", m.id, text)
			}
		case "tool":
			pages = append(pages, text)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if n := len(pages); n < len(m.offsets) {
		args, _ := json.Marshal(map[string]any{"id": m.id, "offset": m.offsets[n], "length": agent.DefaultAttachmentPage})
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"pages","choices":[{"index":0,
			"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%q}}]}}]}`, n, n, agent.AttachmentToolName, args)
		return
	}
	m.mu.Lock()
	m.pages = pages
	m.mu.Unlock()
	// The answer quotes the last line of each page: derived from what the model read.
	var quoted []string
	for _, p := range pages {
		_, body, _ := strings.Cut(p, "\n")
		quoted = append(quoted, lastLine(body))
	}
	answer, _ := json.Marshal("I read: " + strings.Join(quoted, " | "))
	fmt.Fprintf(w, `{"id":"chatcmpl-end","object":"chat.completion","created":1,"model":"pages","choices":[{"index":0,
		"finish_reason":"stop","message":{"role":"assistant","content":%s}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, answer)
}

// lastLine returns the last line of text that ends in a newline, without it.
func lastLine(text string) string {
	text = strings.TrimSuffix(text, "\n")
	return text[strings.LastIndex(text, "\n")+1:]
}

// logLine is line i of a log of n lines: 64 bytes, so that a line's offset is 64*i; the last
// says why the worker stopped.
func logLine(i, n int) string {
	if i == n-1 {
		return fmt.Sprintf("%-63s\n", "2026-12-01T05:59:59Z worker-3 FATAL out of memory, stopping")
	}
	return fmt.Sprintf("%-63s\n", fmt.Sprintf("2026-12-01T05:00:00Z worker-3 request %07d handled in 12 ms", i))
}

// Issue 35's acceptance: a 6 MB log pasted into a request travels by reference. The producer
// offloads it to the attachment store (turn.Offload) and sends a small record; the consumer's
// turn runs turn/agent over the chat-completions protocol, whose model reads the log through
// the read_attachment tool in pages (the first, a middle one, the last), each read a journal
// step; the answer quotes what it read. No record over 1 MB goes to any topic on the way.
func TestAttachmentByReference(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, 1)
	watch := e.watchProduce()
	ctx := context.Background()

	const lines = 6 << 20 / 64 // 98,304 lines, 6 MiB
	var log strings.Builder
	log.Grow(6 << 20)
	for i := range lines {
		log.WriteString(logLine(i, lines))
	}
	store := attachment.NewMemoryStore()
	req := request("c-log", "why did the worker stop?\n"+log.String())
	moved, err := turn.Offload(ctx, store, turn.DefaultApp, &req, 0)
	require.NoError(t, err)
	require.True(t, moved)
	ref := req.Attachments[0]
	require.Greater(t, ref.Size, int64(6<<20))

	const page = agent.DefaultAttachmentPage
	content := "why did the worker stop?\n" + log.String() // the attachment's bytes
	offsets := []int64{0, ref.Size / 2 / 64 * 64, ref.Size - page/2}
	model := &pageModel{t: t, id: ref.ID, offsets: offsets}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	client, err := chatcompletion.New(chatcompletion.Config{BaseURL: srv.URL + "/v1", Model: "pages",
		Tools: []agent.Tool{agent.AttachmentTool(store, 0)}})
	require.NoError(t, err)
	e.start(memberOpts{runner: func(r *turn.Runner) {
		r.Model = client
		r.Attachments = store
	}})

	e.produce(req)
	results := e.resultsByID(1)[req.ID]
	require.Len(t, results, 1)
	res, err := turn.DecodeResult(results[0].Value)
	require.NoError(t, err)

	// The pages are the attachment's bytes at the offsets asked for.
	model.mu.Lock()
	pages := model.pages
	model.mu.Unlock()
	require.Len(t, pages, len(offsets))
	var quoted []string
	for i, p := range pages {
		head, body, ok := strings.Cut(p, "\n")
		require.True(t, ok, p)
		m := toolHeader.FindStringSubmatch(head)
		require.NotNil(t, m, "page %d: %s", i, head)
		from, _ := strconv.ParseInt(m[2], 10, 64)
		n, _ := strconv.Atoi(m[4])
		require.Equal(t, offsets[i], from, "page %d", i)
		require.Equal(t, content[from:from+int64(n)], body, "page %d holds the attachment's bytes", i)
		require.LessOrEqual(t, n, page)
		quoted = append(quoted, lastLine(body))
	}
	require.Len(t, pages[2][strings.Index(pages[2], "\n")+1:], page/2, "the last page is short: it ends the attachment")
	require.Contains(t, pages[2], "this page ends the attachment")
	require.Equal(t, "I read: "+strings.Join(quoted, " | "), res.Text)
	require.Equal(t, strings.TrimSuffix(logLine(lines-1, lines), "\n"), quoted[2], "the answer quotes the log's last line")
	require.Contains(t, res.Text, "FATAL out of memory")

	// Each read is a journal step of the turn, recorded with the page it returned.
	steps, err := e.inbox.Steps(ctx, turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	var reads []string
	for _, s := range steps {
		if s.Name == agent.ToolStepPrefix+agent.AttachmentToolName {
			var out struct{ Output string }
			require.NoError(t, json.Unmarshal(s.Output, &out))
			reads = append(reads, out.Output)
		}
	}
	require.Equal(t, pages, reads, "every read is a journal step")

	// No record over 1 MB on any topic: the request, the result, none dead-lettered.
	watch.mu.Lock()
	defer watch.mu.Unlock()
	require.Equal(t, map[string]int{e.requests: 1, e.results: 1}, watch.records)
	for topic, size := range watch.maxBatch {
		require.Less(t, size, kafkaRecordLimit, "a record batch of %d bytes to %s", size, topic)
	}
	require.Less(t, watch.maxBatch[e.requests], 4<<10, "the 6 MB request travels as a small record")
}
