package turntest

import "go.uber.org/goleak"

// LeakOptions returns the goleak options that ignore goroutines sarama's
// dependencies start once per process and never stop (the go-metrics meter
// arbiter). A test package that uses this harness checks for leaks with
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, turntest.LeakOptions()...) }
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	}
}
