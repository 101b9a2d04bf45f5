package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-go/turnstile/inbox"
	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// LedgerEraser is a Ledger that forgets: by age (Purge, which RunLedgerPurge schedules) and by
// user (DeleteUser, which the per-user deletion calls). SQLLedger and MemoryLedger implement
// it. The ledger holds the text of every sequenced request handed off (Reconcile re-sends a
// gap from it), so without a purge it grows with every request.
type LedgerEraser interface {
	// Purge deletes the hand-offs recorded before the cutoff and returns how many it deleted,
	// also when it fails part way. It leaves the idle runs' States (the sequence mark a
	// conversation's next run starts from: without it the next run would wait for sequence 1)
	// and the overflow of running conversations (requests not applied yet).
	Purge(ctx context.Context, before time.Time) (int64, error)
	// DeleteUser deletes the rows of userID (hand-offs of the user's requests, the States and
	// overflow the user's conversations saved) and every row of the conversations given,
	// whoever's; it returns how many rows it deleted. Rows written before a SQLLedger's schema
	// version 3 carry no user: only the conversations given reach them.
	DeleteUser(ctx context.Context, userID string, conversationIDs []string) (int64, error)
}

// LedgerUserEraser is a LedgerEraser that finds and counts a user's rows. DeleteUser and
// UserEraser reach through it the conversations that never applied a request (all their
// requests held at a sequence gap: no session, and without Config.SearchAttributes nothing in
// the visibility store), and UserEraser's dry run counts with it. SQLLedger and MemoryLedger
// implement it.
type LedgerUserEraser interface {
	LedgerEraser
	// UserConversations returns, ascending, the conversations in which userID handed off a
	// request and no other user has a row (a request sent to another user's conversation,
	// which the Runner refuses, does not lead to it). Errors: an empty user id, the store's.
	UserConversations(ctx context.Context, userID string) ([]string, error)
	// CountUser returns how many rows DeleteUser would delete now.
	CountUser(ctx context.Context, userID string, conversationIDs []string) (int64, error)
}

// RunLedgerPurge purges l by age on s's schedule, as inbox.RunPurge does the inbox: at once
// and then every s.Every, the hand-offs recorded before now less s.Horizon, until ctx ends.
// Keep s.Horizon longer than a gap may stay open (Reconcile re-sends a gap from the ledger, and
// cannot once the rows are gone) and longer than the requests topic's retention. Errors: a nil
// ledger, an invalid schedule.
func RunLedgerPurge(ctx context.Context, l LedgerEraser, s inbox.PurgeSchedule) error {
	if l == nil {
		return errors.New("workflow: RunLedgerPurge: nil ledger")
	}
	return inbox.RunPurgeFunc(ctx, "ledger", l.Purge, s)
}

// ledgerPurgeBatch is how many hand-offs one purge statement deletes.
const ledgerPurgeBatch = 1000

// Purge implements LedgerEraser, in batches of ledgerPurgeBatch rows that commit on their own.
func (l *SQLLedger) Purge(ctx context.Context, before time.Time) (int64, error) {
	q := l.d.Query(`DELETE FROM {p}handoffs WHERE handed_at < $1 AND (conversation_id, sequence) IN (
		SELECT conversation_id, sequence FROM {p}handoffs WHERE handed_at < $1 LIMIT $2)`)
	var total int64
	for {
		var n int64
		err := l.d.Write(ctx, l.db, func() error {
			res, err := l.db.ExecContext(ctx, q, l.d.Time(before), ledgerPurgeBatch)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return total, fmt.Errorf("workflow: ledger: purge: %w", sqldialect.ClassifyContext(ctx, err))
		}
		if total += n; n < ledgerPurgeBatch {
			return total, nil
		}
	}
}

// DeleteUser implements LedgerEraser in one transaction.
func (l *SQLLedger) DeleteUser(ctx context.Context, userID string, conversationIDs []string) (int64, error) {
	return l.deleteUser(ctx, userID, conversationIDs, false)
}

// CountUser implements LedgerUserEraser: DeleteUser's statements in a transaction rolled back.
func (l *SQLLedger) CountUser(ctx context.Context, userID string, conversationIDs []string) (int64, error) {
	return l.deleteUser(ctx, userID, conversationIDs, true)
}

// UserConversations implements LedgerUserEraser.
func (l *SQLLedger) UserConversations(ctx context.Context, userID string) ([]string, error) {
	if userID == "" {
		return nil, errors.New("workflow: ledger: UserConversations: empty user id")
	}
	var rows []ledgerOwner
	err := func() error {
		r, err := l.db.QueryContext(ctx, l.d.Query(`
			SELECT conversation_id, user_id FROM {p}handoffs WHERE conversation_id IN (SELECT conversation_id FROM {p}handoffs WHERE user_id = $1)
			UNION SELECT conversation_id, user_id FROM {p}conversation_states WHERE conversation_id IN (SELECT conversation_id FROM {p}handoffs WHERE user_id = $1)
			UNION SELECT conversation_id, user_id FROM {p}overflow WHERE conversation_id IN (SELECT conversation_id FROM {p}handoffs WHERE user_id = $1)`), userID)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var o ledgerOwner
			if err := r.Scan(&o.conv, &o.user); err != nil {
				return err
			}
			rows = append(rows, o)
		}
		return r.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("workflow: ledger: conversations of %s: %w", userID, sqldialect.ClassifyContext(ctx, err))
	}
	return ownConversations(userID, rows), nil
}

// ledgerOwner is a ledger row's conversation and user.
type ledgerOwner struct{ conv, user string }

// ownConversations returns, ascending, the conversations of rows in which userID has a row and
// no other user has one: UserConversations' rule, so that a request a user sent to another's
// conversation (refused, G7) does not lead to that conversation.
func ownConversations(userID string, rows []ledgerOwner) []string {
	mine, other := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		switch r.user {
		case userID:
			mine[r.conv] = true
		case "":
		default:
			other[r.conv] = true
		}
	}
	out := []string{}
	for conv := range mine {
		if !other[conv] {
			out = append(out, conv)
		}
	}
	slices.Sort(out)
	return out
}

// deleteUser is DeleteUser, rolled back in a dry run.
func (l *SQLLedger) deleteUser(ctx context.Context, userID string, conversationIDs []string, dryRun bool) (int64, error) {
	if userID == "" {
		return 0, errors.New("workflow: ledger: DeleteUser: empty user id")
	}
	tables := []string{"handoffs", "conversation_states", "overflow"}
	var total int64
	err := l.d.Write(ctx, l.db, func() error {
		total = 0 // Write may call again
		tx, err := l.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		exec := func(q string, arg any) error {
			res, err := tx.ExecContext(ctx, l.d.Query(q), arg)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			total += n
			return err
		}
		for _, t := range tables {
			if err := exec(`DELETE FROM {p}`+t+` WHERE user_id = $1`, userID); err != nil {
				return err
			}
			for _, conv := range conversationIDs {
				if err := exec(`DELETE FROM {p}`+t+` WHERE conversation_id = $1`, conv); err != nil {
					return err
				}
			}
		}
		if dryRun {
			return tx.Rollback()
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, fmt.Errorf("workflow: ledger: delete user %s: %w", userID, sqldialect.ClassifyContext(ctx, err))
	}
	return total, nil
}

// Purge implements LedgerEraser.
func (l *MemoryLedger) Purge(_ context.Context, before time.Time) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for id, c := range l.convs {
		for seq, r := range c.bySeq {
			if r.at.Before(before) {
				delete(c.bySeq, seq)
				n++
			}
		}
		if len(c.bySeq) == 0 {
			delete(l.convs, id)
		}
	}
	return n, nil
}

// DeleteUser implements LedgerEraser.
func (l *MemoryLedger) DeleteUser(_ context.Context, userID string, conversationIDs []string) (int64, error) {
	return l.deleteUser(userID, conversationIDs, false)
}

// CountUser implements LedgerUserEraser.
func (l *MemoryLedger) CountUser(_ context.Context, userID string, conversationIDs []string) (int64, error) {
	return l.deleteUser(userID, conversationIDs, true)
}

// UserConversations implements LedgerUserEraser.
func (l *MemoryLedger) UserConversations(_ context.Context, userID string) ([]string, error) {
	if userID == "" {
		return nil, errors.New("workflow: ledger: UserConversations: empty user id")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var rows []ledgerOwner
	for id, c := range l.convs {
		for _, r := range c.bySeq {
			rows = append(rows, ledgerOwner{id, r.env.Request.UserID})
		}
	}
	for id, st := range l.states {
		rows = append(rows, ledgerOwner{id, st.UserID})
	}
	for id, q := range l.overflow {
		for _, env := range q {
			rows = append(rows, ledgerOwner{id, env.Request.UserID})
		}
	}
	return ownConversations(userID, rows), nil
}

// deleteUser is DeleteUser; a dry run only counts.
func (l *MemoryLedger) deleteUser(userID string, conversationIDs []string, dryRun bool) (int64, error) {
	if userID == "" {
		return 0, errors.New("workflow: ledger: DeleteUser: empty user id")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for id, c := range l.convs {
		whole := slices.Contains(conversationIDs, id)
		for seq, r := range c.bySeq {
			if whole || r.env.Request.UserID == userID {
				if !dryRun {
					delete(c.bySeq, seq)
				}
				n++
			}
		}
		if len(c.bySeq) == 0 && !dryRun {
			delete(l.convs, id)
		}
	}
	for id, st := range l.states {
		if st.UserID == userID || slices.Contains(conversationIDs, id) {
			if !dryRun {
				delete(l.states, id)
			}
			n++
		}
	}
	for id, q := range l.overflow {
		for pos, env := range q {
			if env.Request.UserID == userID || slices.Contains(conversationIDs, id) {
				if !dryRun {
					delete(q, pos)
				}
				n++
			}
		}
	}
	return n, nil
}

// UserDeletion configures DeleteUser.
type UserDeletion struct {
	// Namespace of the conversation workflows; default "default".
	Namespace string
	// Conversations are conversation ids known to be the user's besides those the visibility
	// store finds by the TurnstileUser search attribute: the conversations of the user's
	// sessions (sqlsession.Store.List with ListFilter.User), which reach workflows that ran
	// without Config.SearchAttributes. Their workflow ids are IDPrefix + id.
	Conversations []string
	// IDPrefix is BridgeOptions.IDPrefix; default DefaultIDPrefix.
	IDPrefix string
	// Ledger, when set, loses the user's rows and every row of the conversations found
	// (LedgerEraser.DeleteUser). When it is a LedgerUserEraser (SQLLedger, MemoryLedger), the
	// conversations where it finds the user's hand-offs are the user's too.
	Ledger LedgerEraser
	// Reason is recorded on each terminated run; default "per-user deletion".
	Reason string
}

// UserDeleted is what DeleteUser removed.
type UserDeleted struct {
	// Conversations are the conversation ids whose workflows were looked for, ascending.
	Conversations []string `json:"conversations"`
	// Terminated counts the runs deleted while the visibility store listed them as running
	// (the deletion terminates them first; a run that had just closed may be counted);
	// Deleted counts the runs (open and closed) deleted.
	Terminated int `json:"terminated"`
	Deleted    int `json:"deleted"`
	// LedgerRows counts the ledger rows deleted.
	LedgerRows int64 `json:"ledger_rows"`
}

// DeleteUser removes what Temporal mode keeps of one user (a data-deletion request, beside
// the session store's DeleteUser; turn.Retention.EraseUser with UserEraser as its External
// does both): every run of the user's conversation workflows, found in the visibility store
// (TurnstileUser = userID, when the workflows keep search attributes: the Bridge sets it when
// its request starts the run, so a conversation held at a gap is found too), by
// opts.Conversations and by the ledger's hand-offs of the user (LedgerUserEraser), is deleted with its history through the WorkflowService's
// DeleteWorkflowExecution (a running run is terminated by it first, in the same step), since
// the histories hold the texts of the user's requests (the inputs of signals and
// activities); then the user's ledger rows go (opts.Ledger). Without the deletion, a closed
// run stays until the namespace's retention period has passed after it closed.
//
// The server deletes asynchronously: the runs leave the visibility store within a minute
// (about 33 s for three runs on the dev server).
// Stop the user's traffic first: a request still in the requests topic starts a new run.
// A run that is already gone is no error. Errors: an empty user id, a nil client, the
// server's or the ledger's (what was removed before stays removed; running DeleteUser again
// removes the rest).
func DeleteUser(ctx context.Context, c client.Client, userID string, opts UserDeletion) (UserDeleted, error) {
	var out UserDeleted
	switch {
	case c == nil:
		return out, errors.New("workflow: DeleteUser: nil client")
	case userID == "":
		return out, errors.New("workflow: DeleteUser: empty user id")
	}
	opts = opts.withDefaults()
	opts, err := withLedgerConversations(ctx, userID, opts)
	if err != nil {
		return out, err
	}
	runs, convs, err := userRuns(ctx, c, userID, opts)
	if err != nil {
		return out, err
	}
	out.Conversations = convs
	for _, r := range runs {
		// An open run is terminated by the deletion itself (the server's deleteAfterTerminate:
		// one step, deleted as its close completes); a TerminateWorkflow first would leave a
		// closed run whose deletion waits for its close to reach visibility, a minute or more
		// on the dev server.
		_, err := c.WorkflowService().DeleteWorkflowExecution(ctx, &workflowservice.DeleteWorkflowExecutionRequest{
			Namespace: opts.Namespace, WorkflowExecution: r.GetExecution()})
		if err != nil && !gone(err) {
			return out, fmt.Errorf("workflow: DeleteUser: delete %s run %s: %w", r.GetExecution().GetWorkflowId(), r.GetExecution().GetRunId(), err)
		}
		if err == nil && r.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			out.Terminated++
		}
		out.Deleted++
	}
	if opts.Ledger != nil {
		n, err := opts.Ledger.DeleteUser(ctx, userID, convs)
		out.LedgerRows = n
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// withDefaults returns o with its defaults set.
func (o UserDeletion) withDefaults() UserDeletion {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.IDPrefix == "" {
		o.IDPrefix = DefaultIDPrefix
	}
	if o.Reason == "" {
		o.Reason = "per-user deletion"
	}
	return o
}

// withLedgerConversations returns opts with the conversations the ledger finds the user in
// (LedgerUserEraser.UserConversations) added to Conversations.
func withLedgerConversations(ctx context.Context, userID string, opts UserDeletion) (UserDeletion, error) {
	l, ok := opts.Ledger.(LedgerUserEraser)
	if !ok {
		return opts, nil
	}
	convs, err := l.UserConversations(ctx, userID)
	if err != nil {
		return opts, fmt.Errorf("workflow: DeleteUser: %w", err)
	}
	opts.Conversations = append(slices.Clone(opts.Conversations), convs...)
	slices.Sort(opts.Conversations)
	opts.Conversations = slices.Compact(opts.Conversations)
	return opts, nil
}

// gone reports whether err says the run is not there (deleted already) or closed already.
func gone(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf) || strings.Contains(strings.ToLower(err.Error()), "already completed")
}

// userRuns lists every run of the user's conversation workflows: by the TurnstileUser search
// attribute (a namespace without it registered has no such runs) and by the workflow ids of
// opts.Conversations; and the conversation ids, ascending.
func userRuns(ctx context.Context, c client.Client, userID string, opts UserDeletion) ([]*workflowExecutionInfo, []string, error) {
	seen := map[string]bool{}
	var runs []*workflowExecutionInfo
	convs := map[string]bool{}
	for _, id := range opts.Conversations {
		convs[id] = true
	}
	add := func(query string, tolerateUnknown bool) error {
		var token []byte
		for {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: opts.Namespace, Query: query, NextPageToken: token})
			var bad *serviceerror.InvalidArgument
			if tolerateUnknown && errors.As(err, &bad) {
				return nil // TurnstileUser is not registered: no workflow keeps it
			}
			if err != nil {
				return fmt.Errorf("workflow: DeleteUser: list %s: %w", query, err)
			}
			for _, e := range resp.GetExecutions() {
				key := e.GetExecution().GetWorkflowId() + "/" + e.GetExecution().GetRunId()
				if !seen[key] {
					seen[key] = true
					runs = append(runs, e)
				}
				if conv := searchKeyword(e, SearchConversation.GetName()); conv != "" {
					convs[conv] = true
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				return nil
			}
		}
	}
	if err := add(fmt.Sprintf("%s = %s", SearchUser.GetName(), quoteList(userID)), true); err != nil {
		return nil, nil, err
	}
	for chunk := range slices.Chunk(opts.Conversations, 50) {
		ids := make([]string, len(chunk))
		for i, conv := range chunk {
			ids[i] = quoteList(opts.IDPrefix + conv)
		}
		if err := add("WorkflowId IN ("+strings.Join(ids, ", ")+")", false); err != nil {
			return nil, nil, err
		}
	}
	ids := make([]string, 0, len(convs))
	for id := range convs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return runs, ids, nil
}

// workflowExecutionInfo is a run as the visibility store lists it.
type workflowExecutionInfo = workflowpb.WorkflowExecutionInfo

// searchKeyword returns the Keyword search attribute name of a listed run, "" without it.
func searchKeyword(e *workflowExecutionInfo, name string) string {
	p := e.GetSearchAttributes().GetIndexedFields()[name]
	if p == nil {
		return ""
	}
	var s string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
		return ""
	}
	return s
}

// quoteList quotes s as a string literal of a visibility list query.
func quoteList(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
