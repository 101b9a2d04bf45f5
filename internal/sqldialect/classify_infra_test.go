package sqldialect

import (
	"errors"
	"testing"
)

// TestInfraErrorsAreRetryable: database failures that are no fault of the request
// (disk full, out of memory, a primary demoted to read-only during a failover, an I/O error)
// must classify as retryable; otherwise the consumer counts them as failed attempts and
// dead-letters every record it touches while the database is sick.
func TestInfraErrorsAreRetryable(t *testing.T) {
	for _, err := range []error{
		stateErr("53100"),  // disk_full
		stateErr("53200"),  // out_of_memory
		stateErr("53400"),  // configuration_limit_exceeded
		stateErr("25006"),  // read_only_sql_transaction: connected to a demoted primary / standby
		stateErr("58030"),  // io_error
		codeErr(13),        // SQLITE_FULL
		codeErr(10),        // SQLITE_IOERR
		codeErr(10 | 3<<8), // SQLITE_IOERR_WRITE
	} {
		var r interface{ Retryable() bool }
		if !errors.As(Classify(err), &r) {
			t.Errorf("%v: not retryable; the consumer would count it as a failed attempt", err)
		}
	}
}
