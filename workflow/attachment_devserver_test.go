package workflow

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
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-go/turnstile/attachment/fsattachment"
	"github.com/turnstile-go/turnstile/turn"
	"github.com/turnstile-go/turnstile/turn/agent"
	"github.com/turnstile-go/turnstile/turn/chatcompletion"
)

// kafkaRecordLimit is Kafka's default limit on a record batch (message.max.bytes), and so on
// any record: 1 MB.
const kafkaRecordLimit = 1_000_000

// pageHeader is the first line of a read_attachment output: the id, the first and last byte,
// the bytes it holds and the attachment's size.
var pageHeader = regexp.MustCompile(`^attachment (sha256:[0-9a-f]{64}): bytes (\d+) to (\d+) \((\d+) bytes\) of (\d+), as text; `)

// pageReader is a scripted chat-completions server (the OpenAI protocol of turn/chatcompletion)
// whose model asks read_attachment for one page of attachment id per call, at each offset in
// turn, then answers with the last line of the last page it got.
type pageReader struct {
	t       testing.TB
	id      string
	offsets []int64

	mu  sync.Mutex
	got []string // the tool outputs of the last call, in order
}

func (p *pageReader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	raw, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The tool outputs since the user's message: the pages this turn read so far.
	var outputs []string
	for _, m := range body.Messages {
		text, _ := m.Content.(string)
		if m.Role == "user" {
			outputs = outputs[:0]
			if !strings.Contains(text, p.id) {
				p.t.Errorf("the user's message does not name attachment %s: %.500s", p.id, text)
			}
		} else if m.Role == "tool" {
			outputs = append(outputs, text)
		}
	}
	p.mu.Lock()
	p.got = outputs
	p.mu.Unlock()

	var message map[string]any
	finish := "stop"
	if n := len(outputs); n < len(p.offsets) {
		args, _ := json.Marshal(map[string]any{"id": p.id, "offset": p.offsets[n], "length": agent.DefaultAttachmentPage})
		finish = "tool_calls"
		message = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "read-" + strconv.Itoa(n), "type": "function",
			"function": map[string]any{"name": agent.AttachmentToolName, "arguments": string(args)},
		}}}
	} else {
		_, page, _ := strings.Cut(outputs[n-1], "\n")
		message = map[string]any{"role": "assistant", "content": "The worker stopped: " + finalLine(page)}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "scripted", "object": "chat.completion", "created": 1, "model": "pages",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": message}},
		"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

// pages returns the tool outputs the model last got.
func (p *pageReader) pages() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

// finalLine returns the last newline-ended line of text, without its newline.
func finalLine(text string) string {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	return lines[len(lines)-1]
}

// Issue 35's acceptance line in Temporal mode: a 6 MB log pasted into a request travels by
// reference. The producer offloads it (turn.Offload) into a filesystem attachment store that
// the worker shares, and sends a small record; the consumer hands it through the bridge to the
// conversation workflow, whose activity runs turn/agent over the chat-completions protocol; the
// scripted model reads the first, a middle and the last page with read_attachment, each read a
// journal step, and answers with the log's last line. No Kafka record reaches 1 MB and no
// payload of the workflow's history reaches 256 KiB on the way.
func TestDevServerAttachmentByReference(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := newStack(t, 1)
	ctx := context.Background()

	const lines, lineBytes = 6 << 20 / 64, 64 // 98,304 lines of 64 bytes: 6 MiB
	var log strings.Builder
	log.Grow(lines * lineBytes)
	for i := range lines - 1 {
		fmt.Fprintf(&log, "%-63s\n", fmt.Sprintf("2026-12-01T05:00:00Z worker-7 job %07d done in 9 ms", i))
	}
	fmt.Fprintf(&log, "%-63s\n", "2026-12-01T05:59:59Z worker-7 FATAL disk full, stopping")
	const question = "why did worker-7 stop?\n"
	content := question + log.String() // the attachment's bytes

	dir := t.TempDir()
	producerStore, err := fsattachment.New(dir, fsattachment.Options{})
	require.NoError(t, err)
	conv := s.cluster.Unique("log")
	req := request(conv, 1, content)
	moved, err := turn.Offload(ctx, producerStore, turn.DefaultApp, &req, 0)
	require.NoError(t, err)
	require.True(t, moved)
	require.Len(t, req.Attachments, 1)
	ref := req.Attachments[0]
	require.Equal(t, int64(len(content)), ref.Size)

	// The first page, one at a line of the middle, and one that ends the log.
	const page = agent.DefaultAttachmentPage
	offsets := []int64{0, int64(len(question)) + lines/2*lineBytes, ref.Size - page/2}
	model := &pageReader{t: t, id: ref.ID, offsets: offsets}
	srv := httptest.NewServer(model)
	t.Cleanup(srv.Close)
	workerStore, err := fsattachment.New(dir, fsattachment.Options{}) // the worker's view of the shared directory
	require.NoError(t, err)
	client, err := chatcompletion.New(chatcompletion.Config{BaseURL: srv.URL + "/v1", Model: "pages",
		Tools: []agent.Tool{agent.AttachmentTool(workerStore, 0)}})
	require.NoError(t, err)
	s.startWorker(func(o *WorkerOptions) {
		o.Runner.Model = client
		o.Runner.Attachments = workerStore
	})
	b := s.bridge(BridgeOptions{})
	s.startMember(b, nil)

	s.produce(req, nil)
	s.waitApplied(b, conv, 1)
	results := s.cluster.ReadResults(t, s.results, 1, wait)
	require.Len(t, results, 1)
	res := results[0]
	require.Equal(t, req.ID, res.RequestID)
	elapsed := time.Since(start)

	// Each page is the attachment's bytes at the offset asked for.
	pages := model.pages()
	require.Len(t, pages, len(offsets))
	for i, p := range pages {
		head, body, ok := strings.Cut(p, "\n")
		require.True(t, ok, "page %d: %.200s", i, p)
		m := pageHeader.FindStringSubmatch(head)
		require.NotNil(t, m, "page %d: %s", i, head)
		from, _ := strconv.ParseInt(m[2], 10, 64)
		n, _ := strconv.Atoi(m[4])
		require.Equal(t, ref.ID, m[1])
		require.Equal(t, offsets[i], from, "page %d", i)
		require.LessOrEqual(t, n, page)
		require.Equal(t, content[from:from+int64(n)], body, "page %d holds the attachment's bytes", i)
	}
	require.Contains(t, pages[2], "this page ends the attachment")
	require.Equal(t, "The worker stopped: 2026-12-01T05:59:59Z worker-7 FATAL disk full, stopping", strings.TrimRight(res.Text, " "),
		"the answer quotes the log's last line")

	// Each read is a journal step of the turn, recorded with the page it returned.
	steps, err := s.inbox.Steps(ctx, turn.InboxKey(turn.DefaultApp, req))
	require.NoError(t, err)
	var reads []string
	for _, st := range steps {
		if st.Name == agent.ToolStepPrefix+agent.AttachmentToolName {
			var out struct{ Output string }
			require.NoError(t, json.Unmarshal(st.Output, &out))
			reads = append(reads, out.Output)
		}
	}
	require.Equal(t, pages, reads, "every read is a journal step")

	// Every record of every topic: the request and the result, none dead-lettered, each well
	// under 1 MB (kfake creates no topic on first use: nothing went elsewhere).
	largestRecord, records := map[string]int{}, map[string]int{}
	for _, topic := range []string{s.requests, s.results, s.dlq} {
		for _, m := range s.cluster.ReadAll(t, topic, int(s.cluster.RecordCount(t, topic)), wait) {
			size := len(m.Key) + len(m.Value)
			for _, h := range m.Headers {
				size += len(h.Key) + len(h.Value)
			}
			records[topic]++
			largestRecord[topic] = max(largestRecord[topic], size)
		}
	}
	require.Equal(t, map[string]int{s.requests: 1, s.results: 1}, records)
	for topic, size := range largestRecord {
		require.Less(t, size, kafkaRecordLimit, "a record of %d bytes on %s", size, topic)
	}
	require.Less(t, largestRecord[s.requests], 4<<10, "the 6 MB request travels as a small record")

	// Every payload of every run of the conversation's workflow.
	h := readHistories(t, s.client, b.WorkflowID(conv))
	h.log(t)
	require.Less(t, h.largest.size, payloadLimit, "the largest payload of the histories (%s)", h.largest.event)
	t.Logf("a %d-byte attachment read in %d pages; largest Kafka record %d bytes (requests), %d bytes (results); largest Temporal payload %d bytes (%s); the result read %s after the test started",
		ref.Size, len(pages), largestRecord[s.requests], largestRecord[s.results], h.largest.size, h.largest.event, elapsed.Round(100*time.Millisecond))
}
