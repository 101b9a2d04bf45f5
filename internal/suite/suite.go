// Package suite holds what the conformance suites session/sessiontest, inbox/inboxtest and
// attachment/attachmenttest share: running a list of subtests, and those of an optional
// interface only for implementations that have it.
package suite

import (
	"reflect"
	"testing"
)

// Case is one subtest: its name and what it checks of a T.
type Case[T any] struct {
	// Name is the subtest's name.
	Name string
	// Run checks v, made for this subtest alone.
	Run func(t *testing.T, v T)
}

// Run runs cases as parallel subtests of t, each on a value newValue makes in it.
func Run[T any](t *testing.T, newValue func(t *testing.T) T, cases []Case[T]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, newValue(t))
		})
	}
}

// RunOptional runs cases as parallel subtests of one parallel subtest named group, each on a
// value newValue makes in it, when those values implement T (an optional interface). When
// they do not, the group is skipped with the reason, and no case runs.
func RunOptional[T, V any](t *testing.T, group string, newValue func(t *testing.T) V, cases []Case[T]) {
	t.Helper()
	t.Run(group, func(t *testing.T) {
		t.Parallel()
		if _, ok := any(newValue(t)).(T); !ok {
			t.Skipf("%T does not implement %v", newValue(t), reflect.TypeFor[T]())
		}
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				c.Run(t, any(newValue(t)).(T))
			})
		}
	})
}
