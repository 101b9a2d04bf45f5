package workflow

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-go/turnstile/turn"
)

// UserEraser is Temporal mode's part of a user's deletion, as turn.Retention's External: the
// user's conversation workflows with their histories and the user's ledger rows (DeleteUser).
// One call then erases every copy of the user's texts:
//
//	ret := turn.NewRetention(runner)
//	ret.External = workflow.UserEraser{Client: c, Options: workflow.UserDeletion{Ledger: ledger}}
//	erasure, err := ret.EraseUser(ctx, "u-12", false) // true: a dry run that counts
type UserEraser struct {
	// Client reaches the conversation workflows' server. Required.
	Client client.Client
	// Options are DeleteUser's; the conversations of a turn.UserErasure are added to
	// Options.Conversations.
	Options UserDeletion
}

var _ turn.UserEraser = UserEraser{}

// EraseUser implements turn.UserEraser: DeleteUser, or in a dry run the runs DeleteUser would
// delete (listed in the visibility store, as DeleteUser lists them) and the ledger rows (a
// dry run needs a LedgerUserEraser). It reports turn.ErasedWorkflowRuns ("Temporal namespace
// NS") and, with a Ledger, turn.ErasedLedgerRows ("ledger"). A run counted by a dry run may be
// deleted by the server a moment later (a run closing and passing its namespace's
// retention), so the real run may count fewer. Errors: DeleteUser's; a dry run with a Ledger
// that is not a LedgerUserEraser.
func (u UserEraser) EraseUser(ctx context.Context, req turn.UserErasure) (turn.UserErased, error) {
	opts := u.Options.withDefaults()
	opts.Conversations = append(append([]string(nil), opts.Conversations...), req.Conversations...)
	where := "Temporal namespace " + opts.Namespace
	if !req.DryRun {
		got, err := DeleteUser(ctx, u.Client, req.User, opts)
		out := turn.UserErased{Conversations: got.Conversations, Kinds: []turn.ErasedKind{{Name: turn.ErasedWorkflowRuns, Where: where, Count: int64(got.Deleted)}}}
		if opts.Ledger != nil {
			out.Kinds = append(out.Kinds, turn.ErasedKind{Name: turn.ErasedLedgerRows, Where: "ledger", Count: got.LedgerRows})
		}
		return out, err
	}
	switch {
	case u.Client == nil:
		return turn.UserErased{}, errors.New("workflow: UserEraser: nil client")
	case req.User == "":
		return turn.UserErased{}, errors.New("workflow: UserEraser: empty user id")
	}
	var ledger LedgerUserEraser
	if opts.Ledger != nil {
		var ok bool
		if ledger, ok = opts.Ledger.(LedgerUserEraser); !ok {
			return turn.UserErased{}, fmt.Errorf("workflow: UserEraser: the ledger (%T) is not a LedgerUserEraser: a dry run cannot count its rows", opts.Ledger)
		}
	}
	opts, err := withLedgerConversations(ctx, req.User, opts)
	if err != nil {
		return turn.UserErased{}, err
	}
	runs, convs, err := userRuns(ctx, u.Client, req.User, opts)
	if err != nil {
		return turn.UserErased{}, err
	}
	out := turn.UserErased{Conversations: convs, Kinds: []turn.ErasedKind{{Name: turn.ErasedWorkflowRuns, Where: where, Count: int64(len(runs))}}}
	if ledger != nil {
		n, err := ledger.CountUser(ctx, req.User, convs)
		out.Kinds = append(out.Kinds, turn.ErasedKind{Name: turn.ErasedLedgerRows, Where: "ledger", Count: n})
		if err != nil {
			return out, fmt.Errorf("workflow: UserEraser: count the ledger rows of %s: %w", req.User, err)
		}
	}
	return out, nil
}
