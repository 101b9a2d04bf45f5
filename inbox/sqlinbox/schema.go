package sqlinbox

import "github.com/turnstile-go/turnstile/internal/sqldialect"

// migrations is the inbox's schema, step by step. A released step never changes.
var migrations = []sqldialect.Migration{{
	Version: 1,
	Statements: []string{
		`CREATE TABLE {p}inbox (
			request_id TEXT NOT NULL PRIMARY KEY,
			conversation TEXT NOT NULL,
			status TEXT NOT NULL,
			attempts INTEGER NOT NULL,
			deliveries INTEGER NOT NULL,
			result {bytes},
			reason TEXT NOT NULL DEFAULT '',
			topic TEXT NOT NULL,
			kafka_partition INTEGER NOT NULL,
			kafka_offset BIGINT NOT NULL,
			created_at {time} NOT NULL,
			updated_at {time} NOT NULL
		)`,
		`CREATE INDEX {p}inbox_purge ON {p}inbox (updated_at) WHERE status IN ('done', 'dead')`,
	},
}, {
	// The audit of Redrive: a JSON array of inbox.RedriveAudit, '' when never re-driven.
	Version:    2,
	Statements: []string{`ALTER TABLE {p}inbox ADD COLUMN redrives TEXT NOT NULL DEFAULT ''`},
}, {
	// The step journal (inbox.Journal) and the outbox (inbox.Outbox). Steps live under their
	// entry's request_id (no foreign key: SQLite enforces none without a pragma on every
	// connection; Purge and Redrive delete them with their entry). An intent's id is
	// inbox.IntentID(request_id, ordinal). outbox_claim serves Claim, outbox_purge Purge.
	Version: 3,
	Statements: []string{
		`CREATE TABLE {p}inbox_steps (
			request_id TEXT NOT NULL,
			ordinal INTEGER NOT NULL,
			name TEXT NOT NULL,
			output {bytes},
			deferred BOOLEAN NOT NULL,
			created_at {time} NOT NULL,
			PRIMARY KEY (request_id, ordinal)
		)`,
		`CREATE TABLE {p}outbox (
			id TEXT NOT NULL PRIMARY KEY,
			request_id TEXT NOT NULL,
			conversation TEXT NOT NULL,
			ordinal INTEGER NOT NULL,
			name TEXT NOT NULL,
			payload {bytes},
			status TEXT NOT NULL,
			attempts INTEGER NOT NULL,
			reason TEXT NOT NULL DEFAULT '',
			next_at {time} NOT NULL,
			created_at {time} NOT NULL,
			updated_at {time} NOT NULL
		)`,
		`CREATE INDEX {p}outbox_claim ON {p}outbox (status, next_at)`,
		`CREATE INDEX {p}outbox_purge ON {p}outbox (updated_at) WHERE status IN ('delivered', 'dead')`,
		`CREATE INDEX {p}outbox_list ON {p}outbox (created_at, id)`,
	},
}}

// Stored statuses; StatusNew is never stored.
const (
	stInProgress = "in_progress"
	stDone       = "done"
	stDead       = "dead"
)

type queries struct {
	begin, complete, fail, markDead, redrive, get, status, purge string
	beginMany, completeMany                                      func(n int) string
	// The rows of the batched statements (beginMany, completeMany).
	beginRows, completeRows *sqldialect.Rows
}

const entryCols = `request_id, conversation, status, attempts, deliveries, result, reason, topic,
	kafka_partition, kafka_offset, created_at, updated_at, redrives`

func buildQueries(d *sqldialect.Dialect) queries {
	// live is true for the row Begin found when it may count an attempt.
	const live = `i.status = 'in_progress'`
	q := queries{
		// One statement, atomic in both databases: the insert of a new entry, or the count of
		// one more attempt of an entry in progress (PostgreSQL takes the row's lock, SQLite
		// the write lock), or nothing for a done or dead one, which comes back as it is.
		begin: d.Query(`INSERT INTO {p}inbox AS i (request_id, conversation, status, attempts, deliveries,
				reason, topic, kafka_partition, kafka_offset, created_at, updated_at)
			VALUES ($1, $2, 'in_progress', 1, 1, '', $3, $4, $5, $6, $6)
			ON CONFLICT (request_id) DO UPDATE SET
				attempts = CASE WHEN ` + live + ` THEN i.attempts + 1 ELSE i.attempts END,
				deliveries = CASE WHEN ` + live + ` THEN i.deliveries + 1 ELSE i.deliveries END,
				topic = CASE WHEN ` + live + ` THEN excluded.topic ELSE i.topic END,
				kafka_partition = CASE WHEN ` + live + ` THEN excluded.kafka_partition ELSE i.kafka_partition END,
				kafka_offset = CASE WHEN ` + live + ` THEN excluded.kafka_offset ELSE i.kafka_offset END,
				updated_at = CASE WHEN ` + live + ` THEN excluded.updated_at ELSE i.updated_at END
			RETURNING ` + entryCols),
		// First result wins: only an entry in progress becomes done.
		complete: d.Query(`UPDATE {p}inbox SET status = 'done', result = $2, updated_at = $3
			WHERE request_id = $1 AND status = 'in_progress'`),
		fail: d.Query(`UPDATE {p}inbox SET reason = $2,
				attempts = CASE WHEN $3 AND attempts > 0 THEN attempts - 1 ELSE attempts END,
				updated_at = $4
			WHERE request_id = $1 AND status = 'in_progress'`),
		markDead: d.Query(`UPDATE {p}inbox SET status = 'dead', reason = $2, updated_at = $3
			WHERE request_id = $1 AND status <> 'done'`),
		// Only the dead entry read with these redrives changes: of racing Redrives one wins.
		redrive: d.Query(`UPDATE {p}inbox SET status = 'in_progress', attempts = 0, reason = '',
				redrives = $2, updated_at = $3
			WHERE request_id = $1 AND status = 'dead' AND redrives = $4`),
		get:    d.Query(`SELECT ` + entryCols + ` FROM {p}inbox WHERE request_id = $1`),
		status: d.Query(`SELECT status, reason FROM {p}inbox WHERE request_id = $1`),
		// A bounded batch through the partial index; Purge repeats it until a batch comes up
		// short. The outer conditions repeat the subquery's: on a row a concurrent Redrive
		// updated, PostgreSQL re-checks only the DELETE's own WHERE against the new version
		// (EvalPlanQual, READ COMMITTED), so without them a re-driven entry would go too.
		purge: d.Query(`DELETE FROM {p}inbox WHERE status IN ('done', 'dead') AND updated_at < $1
			AND request_id IN (
				SELECT request_id FROM {p}inbox
				WHERE status IN ('done', 'dead') AND updated_at < $1
				LIMIT $2)`),
	}
	q.beginRows, q.completeRows = beginRows(d), completeRows(d)
	q.beginMany = beginManyQuery(d, q.begin)
	q.completeMany = completeManyQuery(d)
	return q
}
