package main

import (
	"github.com/turnstile-go/turnstile/turn"
)

// entryKeyFlags are the flags that find an inbox entry, as inbox get takes them: the request
// id with its user and conversation (the key is turn.InboxKey of --app and those), or the raw
// --key.
type entryKeyFlags struct {
	id, user, conv, key *string
	app                 *string
}

// withEntryKey adds the entry flags to f, which has --app (flags.withApp).
func withEntryKey(f *flags) entryKeyFlags {
	return entryKeyFlags{
		id:   f.String("request-id", "", "the request id"),
		user: f.String("user", "", "the request's user id"),
		conv: f.String("conversation", "", "the request's conversation id"),
		key:  f.String("key", "", "the raw inbox key, instead of --request-id, --user and --conversation"),
		app:  f.app,
	}
}

// resolve returns the inbox key the parsed flags of f name: raw (a positional argument, ""
// when none), else --key, else the key of --request-id, --user and --conversation, all three
// needed. Errors: a usage error naming what is missing.
func (k entryKeyFlags) resolve(f *flags, raw string) (string, error) {
	named := *k.id != "" || *k.user != "" || *k.conv != ""
	switch {
	case (raw != "" || *k.key != "") && named, raw != "" && *k.key != "":
		return "", usagef("give the raw key (--key or an argument) or --request-id, --user and --conversation, not both")
	case raw != "":
		return raw, nil
	case *k.key != "":
		return *k.key, nil
	}
	if err := f.require("request-id", "user", "conversation"); err != nil {
		return "", usagef("%v (or give --key)", err)
	}
	return turn.InboxKey(*k.app, turn.Request{ID: *k.id, UserID: *k.user, ConversationID: *k.conv}), nil
}

// parse parses args into f, a raw key given as an argument (inbox get KEY) included, and
// returns the inbox key they name (resolve).
func (k entryKeyFlags) parse(f *flags, args []string) (string, error) {
	var raw string
	if i := f.firstPositional(args); i >= 0 {
		raw, args = args[i], append(append([]string(nil), args[:i]...), args[i+1:]...)
	}
	if err := f.parse(args); err != nil {
		return "", err
	}
	return k.resolve(f, raw)
}
