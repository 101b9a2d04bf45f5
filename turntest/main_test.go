package turntest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile-go/turnstile/turntest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, turntest.LeakOptions()...)
}
