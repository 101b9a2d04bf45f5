package workflow

import (
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	twf "go.temporal.io/sdk/workflow"
)

// The typed search attributes a conversation workflow keeps up to date when
// Config.SearchAttributes is on (the Bridge sets TurnstileConversation and TurnstileUser when
// its request starts the run), so that an operator finds a user's conversations
// (TurnstileUser = "u-12") or the stuck ones (TurnstilePending > 0) with a list query.
var (
	// SearchConversation is the conversation id (Keyword).
	SearchConversation = temporal.NewSearchAttributeKeyKeyword("TurnstileConversation")
	// SearchUser is the conversation's user id (Keyword).
	SearchUser = temporal.NewSearchAttributeKeyKeyword("TurnstileUser")
	// SearchLastApplied is the last applied sequence (Int).
	SearchLastApplied = temporal.NewSearchAttributeKeyInt64("TurnstileLastAppliedSequence")
	// SearchPending is the count of requests received and not applied yet (Int).
	SearchPending = temporal.NewSearchAttributeKeyInt64("TurnstilePending")
	// SearchLastErrorKind is the turn.Kind name of the last dead-lettered turn (Keyword).
	SearchLastErrorKind = temporal.NewSearchAttributeKeyKeyword("TurnstileLastErrorKind")
)

// SearchAttributeTypes maps each search attribute name to its type, as the operator registers
// them ("temporal operator search-attribute create --name NAME --type TYPE", or the dev
// server's --search-attribute NAME=TYPE).
var SearchAttributeTypes = map[string]enums.IndexedValueType{
	SearchConversation.GetName():  enums.INDEXED_VALUE_TYPE_KEYWORD,
	SearchUser.GetName():          enums.INDEXED_VALUE_TYPE_KEYWORD,
	SearchLastApplied.GetName():   enums.INDEXED_VALUE_TYPE_INT,
	SearchPending.GetName():       enums.INDEXED_VALUE_TYPE_INT,
	SearchLastErrorKind.GetName(): enums.INDEXED_VALUE_TYPE_KEYWORD,
}

// startAttributes returns the search attributes of a run that a request of user in conv
// starts, with Config.SearchAttributes on (none without: the namespace may not have them
// registered): the conversation and the user. So a run is found by TurnstileUser from its
// start, also while every request it holds waits at a sequence gap and no turn has applied
// (workflow.DeleteUser finds it); the workflow's own upserts (upsertSearch) set the user again
// once the conversation's owner is known (after a first turn, or from its saved State), which
// replaces the user of a stranger's request that started the run. Setting them at the start,
// not in the workflow, changes no workflow code: every recorded history replays.
func (b *Bridge) startAttributes(conv, user string) temporal.SearchAttributes {
	if !b.opts.Config.SearchAttributes {
		return temporal.SearchAttributes{}
	}
	ups := []temporal.SearchAttributeUpdate{SearchConversation.ValueSet(conv)}
	if user != "" {
		ups = append(ups, SearchUser.ValueSet(user))
	}
	return temporal.NewSearchAttributes(ups...)
}

type searchValues struct {
	set                bool
	user, errKind      string
	lastApplied, pends int64
}

// upsertSearch upserts the search attributes that changed since the last upsert.
func (c *conversation) upsertSearch(ctx twf.Context) error {
	if !c.cfg.SearchAttributes {
		return nil
	}
	now := searchValues{set: true, user: c.UserID, errKind: c.LastErrorKind, lastApplied: c.NextSequence - 1, pends: int64(len(c.Pending)) + c.Overflow}
	if now == c.published {
		return nil
	}
	var ups []temporal.SearchAttributeUpdate
	if !c.published.set {
		ups = append(ups, SearchConversation.ValueSet(c.ConversationID))
	}
	if now.user != c.published.user && now.user != "" {
		ups = append(ups, SearchUser.ValueSet(now.user))
	}
	if now.errKind != c.published.errKind && now.errKind != "" {
		ups = append(ups, SearchLastErrorKind.ValueSet(now.errKind))
	}
	if !c.published.set || now.lastApplied != c.published.lastApplied {
		ups = append(ups, SearchLastApplied.ValueSet(now.lastApplied))
	}
	if !c.published.set || now.pends != c.published.pends {
		ups = append(ups, SearchPending.ValueSet(now.pends))
	}
	c.published = now
	return twf.UpsertTypedSearchAttributes(ctx, ups...)
}
