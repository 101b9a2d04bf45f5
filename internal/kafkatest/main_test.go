package kafkatest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/turnstile-go/turnstile/internal/kafkatest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, kafkatest.LeakOptions()...)
}
