// Package failing is a package for tools/testsummary's test of ./test.sh: one test skips with
// a reason, one fails. go test ./... leaves it out (it is under testdata); the test names it.
package failing

import "testing"

func TestSkipsWithAReason(t *testing.T) { t.Skip("testsummary: the reason of a skip") }

func TestFails(t *testing.T) { t.Fatal("testsummary: a failure on purpose") }

func TestSubtests(t *testing.T) {
	t.Run("runs", func(t *testing.T) { t.Parallel(); t.Log("a line of a test that passes") })
	t.Run("skips", func(t *testing.T) {
		t.Parallel()
		t.Log("a line before the skip")
		t.Skipf("testsummary: a subtest's reason,\nover two lines")
	})
}
