package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// DefaultConcurrency is the concurrency a store sizes its pool for when its options leave it
// zero: the consumer's default MaxInFlight, 64.
const DefaultConcurrency = 64

// ErrPoolTooSmall: a *sql.DB's pool cannot serve the concurrency asked of it: its
// MaxOpenConns is below it, or (CheckPool) it closes connections beyond an idle limit below it.
var ErrPoolTooSmall = errors.New("the *sql.DB's connection pool is smaller than the concurrency")

// idleLimits holds, per *sql.DB, the largest idle limit SizePool set on it (an *idleLimit), so
// that stores sharing a *sql.DB never lower each other's limit. database/sql cannot report
// the limit, hence the record. Like sqliteWriters, one small entry per *sql.DB ever sized.
var idleLimits sync.Map

type idleLimit struct {
	mu sync.Mutex
	n  int
}

// SizePool sizes db's pool for concurrency calls at once, for a store's New.
//
// concurrency < 0 leaves the pool alone. concurrency == 0 means DefaultConcurrency, lowered
// to db's MaxOpenConns when that is set below it. concurrency > 0 is the caller's figure:
// when db's MaxOpenConns is set below it, SizePool changes nothing and returns an error
// wrapping ErrPoolTooSmall.
//
// The size is set with db.SetMaxIdleConns, so that up to concurrency connections stay open
// between calls instead of being closed on release and reopened by the next call
// (database/sql keeps 2 by default). That replaces whatever idle limit db had, except that it
// never lowers a limit SizePool set on db before: the largest one wins.
func SizePool(db *sql.DB, concurrency int) error {
	if concurrency < 0 {
		return nil
	}
	explicit := concurrency > 0
	if !explicit {
		concurrency = DefaultConcurrency
	}
	if err := checkMaxOpen(db, concurrency); err != nil {
		if explicit {
			return err
		}
		concurrency = db.Stats().MaxOpenConnections
	}
	v, _ := idleLimits.LoadOrStore(db, &idleLimit{})
	l := v.(*idleLimit)
	l.mu.Lock()
	defer l.mu.Unlock()
	if concurrency > l.n {
		l.n = concurrency
		db.SetMaxIdleConns(concurrency)
	}
	return nil
}

// checkMaxOpen returns an error wrapping ErrPoolTooSmall when db's MaxOpenConns is set below
// concurrency.
func checkMaxOpen(db *sql.DB, concurrency int) error {
	if open := db.Stats().MaxOpenConnections; open > 0 && open < concurrency {
		return fmt.Errorf("%w: MaxOpenConns is %d, the concurrency %d (raise it with db.SetMaxOpenConns, or lower the concurrency)",
			ErrPoolTooSmall, open, concurrency)
	}
	return nil
}

// CheckSized reports an error wrapping ErrPoolTooSmall when db cannot serve concurrency calls
// at once as sized: its MaxOpenConns is set below concurrency, or the idle limit SizePool set
// on it is. A pool SizePool never sized (one its owner configured) is checked for
// MaxOpenConns only, as database/sql cannot report its idle limit (CheckPool probes it). It
// does not touch the database.
func CheckSized(db *sql.DB, concurrency int) error {
	if err := checkMaxOpen(db, concurrency); err != nil {
		return err
	}
	v, ok := idleLimits.Load(db)
	if !ok {
		return nil
	}
	l := v.(*idleLimit)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n < concurrency {
		return fmt.Errorf("%w: sized for %d calls at once (Options.Concurrency), the concurrency %d", ErrPoolTooSmall, l.n, concurrency)
	}
	return nil
}

// CheckPool reports whether db can serve concurrency calls at once, each on a connection that
// stays open between calls. It returns an error wrapping ErrPoolTooSmall when db's
// MaxOpenConns is set below concurrency, or when db closes connections it could keep: it
// takes concurrency connections at once (opening those it lacks), hands them back, and
// compares db.Stats().MaxIdleClosed before and after, which grows when the idle limit
// (db.SetMaxIdleConns) is below concurrency. The connections it opened stay in the pool.
// Run it at start-up, before the pool is busy: closures by other callers during the check
// count against it. Other errors: ctx's, or the driver's failure to connect.
func CheckPool(ctx context.Context, db *sql.DB, concurrency int) error {
	if err := checkMaxOpen(db, concurrency); err != nil {
		return err
	}
	before := db.Stats().MaxIdleClosed
	conns := make([]*sql.Conn, 0, max(concurrency, 0))
	var err error
	for range concurrency {
		var c *sql.Conn
		if c, err = db.Conn(ctx); err != nil {
			break
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	if err != nil {
		return fmt.Errorf("check pool: %w", err)
	}
	if closed := db.Stats().MaxIdleClosed - before; closed > 0 {
		return fmt.Errorf("%w: of %d connections in use at once, %d were closed on release instead of kept idle (raise db.SetMaxIdleConns to %d)",
			ErrPoolTooSmall, concurrency, closed, concurrency)
	}
	return nil
}
