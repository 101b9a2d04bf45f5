package sqlsession

import (
	"strconv"

	"github.com/turnstile-go/turnstile/internal/sqldialect"
)

// migrations is the session store's schema, step by step. A released step never changes.
var migrations = []sqldialect.Migration{{
	Version: 1,
	Statements: []string{
		`CREATE TABLE {p}sessions (
			id {serial},
			app TEXT NOT NULL,
			conversation TEXT NOT NULL,
			user_id TEXT NOT NULL,
			state {bytes},
			version BIGINT NOT NULL DEFAULT 0,
			event_count BIGINT NOT NULL DEFAULT 0,
			created_at {time} NOT NULL,
			updated_at {time} NOT NULL,
			CONSTRAINT {p}sessions_app_conversation UNIQUE (app, conversation)
		)`,
		// seq is contiguous from 1 to the session's event_count (events are never deleted one
		// by one); the primary key (session_id, seq) serves Get's newest-N scan.
		`CREATE TABLE {p}events (
			session_id BIGINT NOT NULL REFERENCES {p}sessions (id) ON DELETE CASCADE,
			seq BIGINT NOT NULL,
			request_id TEXT NOT NULL,
			idx INTEGER NOT NULL,
			event_id TEXT NOT NULL,
			author TEXT NOT NULL,
			body TEXT NOT NULL,
			data {bytes},
			at {time},
			PRIMARY KEY (session_id, seq),
			CONSTRAINT {p}events_request UNIQUE (session_id, request_id, idx)
		)`,
	},
}, {
	// Retention: DeleteUser finds a user's sessions, DeleteIdle the oldest ones.
	Version: 2,
	Statements: []string{
		`CREATE INDEX {p}sessions_user ON {p}sessions (app, user_id)`,
		`CREATE INDEX {p}sessions_idle ON {p}sessions (app, updated_at)`,
	},
}}

// queries holds the store's statements, rewritten for the dialect once in New.
type queries struct {
	get, create, owner, bump, turn, deleteSession, deleteEvents, findTurn string
	deleteUser, deleteIdle                                                string
	countUserEvents                                                       string
	ownerID                                                               string
	insertEvents, deleteEventsOf, bumpMany, createMany, insertMany        func(n int) string
	getMany                                                               func(n int) string
	// The rows of the batched statements: bumpMany's, insertMany's, createMany's, getMany's.
	bumpRows, eventRows, createRows, getRows *sqldialect.Rows
	// bumpInsert, on PostgreSQL only (empty on SQLite, which has no writes in a WITH), is
	// bumpMany and insertMany in one statement: the rows of bumpRows with each call's index
	// (bumpIndexRows), and its events' rows led by that index (turnEventRows).
	bumpInsert                   string
	bumpIndexRows, turnEventRows *sqldialect.Rows
}

// getCols are the columns of one Get in the batched get: its index in the batch, the key, how
// many recent events it reads, and the events it holds already (a hint: cid, clo, cc).
const getCols = 8

// bumpCols are the host parameters of one append in the batched bump.
const bumpCols = 9

// eventCols are the columns of one event, in the order of the insert's arguments.
const eventCols = 9

func buildQueries(d *sqldialect.Dialect) queries {
	text := func(name string) sqldialect.Col { return sqldialect.Col{Name: name, Type: sqldialect.ColText} }
	integer := func(name string) sqldialect.Col { return sqldialect.Col{Name: name, Type: sqldialect.ColInt} }
	bytes := func(name string) sqldialect.Col { return sqldialect.Col{Name: name, Type: sqldialect.ColBytes} }
	at := func(name string) sqldialect.Col { return sqldialect.Col{Name: name, Type: sqldialect.ColTime} }
	// The columns of bumpMany's rows are bumpCols, of createMany's createCols, of insertMany's
	// eventCols, in this order.
	bumpRows := d.Rows(text("a"), text("c"), text("u"), integer("x"), integer("n"),
		sqldialect.Col{Name: "hs", Type: sqldialect.ColBool}, bytes("st"), at("t"), text("r"))
	createRows := d.Rows(text("a"), text("c"), text("u"), bytes("st"), at("t"))
	eventRows := d.Rows(integer("session_id"), integer("seq"), text("request_id"), integer("idx"), text("event_id"),
		text("author"), text("body"), bytes("data"), at("at"))
	getRows := d.Rows(integer("i"), text("a"), text("c"), text("u"), integer("n"),
		integer("cid"), integer("clo"), integer("cc"))
	bumpIndexRows := d.Rows(text("a"), text("c"), text("u"), integer("x"), integer("n"),
		sqldialect.Col{Name: "hs", Type: sqldialect.ColBool}, bytes("st"), at("t"), text("r"), integer("k"))
	turnEventRows := d.Rows(integer("k"), integer("idx"), text("event_id"), text("author"), text("body"),
		bytes("data"), at("at")).As("w")
	// dupCheck is the batched bumps' duplicate check: whether the call's turn (request v.r) is
	// stored in the session already. A stored turn has an event of idx 0 (a turn's events are
	// numbered from 0), so it names the whole key of events_request: one index probe, not a
	// walk of the session's events. On PostgreSQL OFFSET 0 keeps the planner from turning it
	// into a join, whose plan (made once per connection and kept, the plan cache's generic
	// plan) walked them after all.
	dupCheck := `SELECT 1 FROM {p}events e WHERE e.session_id = {p}sessions.id AND e.request_id = v.r AND e.idx = 0`
	if d.Name() == sqldialect.PostgreSQL {
		dupCheck += ` OFFSET 0`
	}
	var bumpInsert string
	if d.Name() == sqldialect.PostgreSQL {
		// bumpMany's UPDATE, and the INSERT of the events of the sessions it bumped, numbered
		// from the event_count it returns, as appendMany numbers them: data-modifying
		// statements in WITH all run, on one snapshot
		// (https://www.postgresql.org/docs/current/queries-with.html#QUERIES-WITH-MODIFYING).
		bumpInsert = d.Query(`WITH ` + bumpIndexRows.CTE(0, 1) + `, ` + turnEventRows.CTE(0, bumpIndexRows.Params(0)+1) + `,
			b AS (
				UPDATE {p}sessions SET version = version + 1, event_count = event_count + v.n,
					state = CASE WHEN v.hs THEN v.st ELSE state END, updated_at = v.t
				FROM v
				WHERE app = v.a AND conversation = v.c AND user_id = v.u AND version = v.x
					AND NOT EXISTS (` + dupCheck + `)
				RETURNING v.k AS k, {p}sessions.app AS app, {p}sessions.conversation AS conversation,
					{p}sessions.id AS id, {p}sessions.version AS version, {p}sessions.event_count AS event_count,
					v.n AS n, v.r AS r
			),
			ins AS (
				INSERT INTO {p}events (session_id, seq, request_id, idx, event_id, author, body, data, at)
				SELECT b.id, b.event_count - b.n + w.idx + 1, b.r, w.idx, w.event_id, w.author, w.body, w.data, w.at
				FROM w JOIN b ON b.k = w.k
			)
			SELECT app, conversation, id, version, event_count FROM b`)
	}
	return queries{
		bumpRows: bumpRows, createRows: createRows, eventRows: eventRows, getRows: getRows,
		bumpInsert: bumpInsert, bumpIndexRows: bumpIndexRows, turnEventRows: turnEventRows,
		// The batched get: get's two branches for every session of v, each row led by its
		// call's index. A session's events are 1 to event_count without gaps (every append
		// numbers them from the count it bumped), so its newest n are those above
		// event_count-n: a range of the (session_id, seq) primary key, whatever the history's
		// length. A call that holds the events cid, clo+1 to cc already (Options.Cache; cid
		// 0 holds none) reads only those above cc when they cover the range, as
		// hint.covers tells.
		//
		// On PostgreSQL each session and the range of its events are read by subqueries of
		// their own for each call (LATERAL, with LIMIT), so that the plan, made once per
		// connection with the tables' sizes of that moment, probes the indexes rather than
		// joining whole tables, on tables never analyzed or analyzed as they grow (tables
		// analyzed while small get a scan per call until the next analyze: docs/DESIGN.md);
		// SQLite, which has no LATERAL, plans the statement when it is prepared.
		getMany: getRows.Statement(func(cte string, _ int) string {
			from := `CASE
					WHEN s.id = v.cid AND (v.clo = 0 OR v.clo <= s.event_count - v.n) AND v.cc <= s.event_count AND v.cc > s.event_count - v.n
					THEN v.cc ELSE s.event_count - v.n END`
			// sessions joins each call's session; owned, that session when the call's user owns
			// it, and the events the call reads.
			sessions := `JOIN {p}sessions s ON s.app = v.a AND s.conversation = v.c`
			owned := sessions + ` AND s.user_id = v.u JOIN {p}events e ON e.session_id = s.id AND e.seq > ` + from
			if d.Name() == sqldialect.PostgreSQL {
				sessions = `CROSS JOIN LATERAL (SELECT * FROM {p}sessions s WHERE s.app = v.a AND s.conversation = v.c LIMIT 1) s`
				owned = sessions + ` CROSS JOIN LATERAL (SELECT e.seq, e.event_id, e.request_id, e.author, e.body, e.data, e.at
					FROM {p}events e WHERE e.session_id = s.id AND e.seq > ` + from + `
					ORDER BY e.seq LIMIT v.n) e WHERE s.user_id = v.u`
			}
			return `WITH ` + cte + `
				SELECT v.i, 0 AS kind, s.user_id AS user_id, s.state AS state, s.version AS version,
					s.event_count AS event_count, s.created_at AS created_at, s.updated_at AS updated_at,
					CAST(NULL AS BIGINT) AS seq, CAST(NULL AS TEXT) AS event_id, CAST(NULL AS TEXT) AS request_id,
					CAST(NULL AS TEXT) AS author, CAST(NULL AS TEXT) AS body, CAST(NULL AS {bytes}) AS data,
					CAST(NULL AS {time}) AS at, s.id AS sid
				FROM v ` + sessions + `
				UNION ALL
				SELECT v.i, 1, CAST(NULL AS TEXT), CAST(NULL AS {bytes}), CAST(NULL AS BIGINT), CAST(NULL AS BIGINT),
					CAST(NULL AS {time}), CAST(NULL AS {time}),
					e.seq, e.event_id, e.request_id, e.author, e.body, e.data, e.at, CAST(NULL AS BIGINT)
				FROM v ` + owned
		}),
		// One query for the state and the last $4 events: the session's row, then the newest
		// events found by walking the (session_id, seq) primary key backwards from the end and
		// stopping after $4 rows (ORDER BY seq DESC LIMIT), so the cost does not depend on the
		// history's length; the outer ORDER BY puts them oldest first. The owner check in the
		// second branch keeps another user's events out of the result. The casts give the
		// second branch's NULLs the first branch's types (PostgreSQL types a subquery's bare
		// NULL as text).
		get: d.Query(`SELECT 0 AS kind, s.user_id AS user_id, s.state AS state, s.version AS version,
				s.event_count AS event_count, s.created_at AS created_at, s.updated_at AS updated_at,
				NULL AS seq, NULL AS event_id, NULL AS request_id, NULL AS author, NULL AS body,
				NULL AS data, NULL AS at, s.id AS sid
			FROM {p}sessions s WHERE s.app = $1 AND s.conversation = $2
			UNION ALL
			SELECT * FROM (
				SELECT 1 AS kind, CAST(NULL AS TEXT) AS user_id, CAST(NULL AS {bytes}) AS state,
					CAST(NULL AS BIGINT) AS version, CAST(NULL AS BIGINT) AS event_count,
					CAST(NULL AS {time}) AS created_at, CAST(NULL AS {time}) AS updated_at,
					e.seq, e.event_id, e.request_id, e.author, e.body, e.data, e.at, CAST(NULL AS BIGINT) AS sid
				FROM {p}events e
				WHERE e.session_id = (SELECT s.id FROM {p}sessions s
					WHERE s.app = $1 AND s.conversation = $2 AND s.user_id = $3)
				ORDER BY e.seq DESC
				LIMIT $4
			) recent
			ORDER BY kind, seq`),
		create: d.Query(`INSERT INTO {p}sessions (app, conversation, user_id, state, version, event_count, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 0, 0, $5, $5)
			ON CONFLICT (app, conversation) DO NOTHING
			RETURNING id`),
		createMany: createRows.Statement(func(cte string, _ int) string {
			// SQLite needs the WHERE of an INSERT ... SELECT ... ON CONFLICT to tell the
			// upsert from a join (https://www.sqlite.org/lang_upsert.html).
			return `WITH ` + cte + ` INSERT INTO {p}sessions (app, conversation, user_id, state, version, event_count, created_at, updated_at)
				SELECT a, c, u, st, 0, 0, t, t FROM v WHERE true
				ON CONFLICT (app, conversation) DO NOTHING RETURNING app, conversation`
		}),
		owner:   d.Query(`SELECT user_id, version FROM {p}sessions WHERE app = $1 AND conversation = $2`),
		ownerID: d.Query(`SELECT user_id, version, id FROM {p}sessions WHERE app = $1 AND conversation = $2`),
		// The batched bump: bump's conditions for n appends at once (a session at most once,
		// see batchKey), with the duplicate check in the WHERE clause instead of RETURNING, so
		// that a duplicate leaves its row alone and the transaction can go on for the others.
		// The values' columns have names of their own so that RETURNING names the sessions
		// table's columns unqualified (SQLite's RETURNING sees only that table).
		bumpMany: bumpRows.Statement(func(cte string, _ int) string {
			return `WITH ` + cte + `
				UPDATE {p}sessions SET version = version + 1, event_count = event_count + v.n,
					state = CASE WHEN v.hs THEN v.st ELSE state END, updated_at = v.t
				FROM v
				WHERE app = v.a AND conversation = v.c AND user_id = v.u AND version = v.x
					AND NOT EXISTS (` + dupCheck + `)
				RETURNING app, conversation, id, version, event_count`
		}),
		insertMany: eventRows.Statement(func(cte string, _ int) string {
			return `WITH ` + cte + ` INSERT INTO {p}events (session_id, seq, request_id, idx, event_id, author, body, data, at)
				SELECT * FROM v`
		}),
		// The version check and bump in one statement: on PostgreSQL a concurrent appender
		// waits for this row's lock and then finds the version moved on; on SQLite the
		// transaction already holds the write lock. It also says whether request $9's turn is
		// stored already (one round trip less than a query of its own): when the bump
		// succeeds, every turn appended before is visible to the statement, as each one
		// bumped the version the statement found.
		bump: d.Query(`UPDATE {p}sessions
			SET version = version + 1, event_count = event_count + $5,
				state = CASE WHEN $6 THEN $7 ELSE state END, updated_at = $8
			WHERE app = $1 AND conversation = $2 AND user_id = $3 AND version = $4
			RETURNING id, version, event_count, EXISTS (SELECT 1 FROM {p}events e
				WHERE e.session_id = {p}sessions.id AND e.request_id = $9 AND e.idx = 0)`),
		turn: d.Query(`SELECT seq, event_id, request_id, author, body, data, at
			FROM {p}events WHERE session_id = $1 AND request_id = $2 ORDER BY idx`),
		findTurn: d.Query(`SELECT s.user_id, e.seq, e.event_id, e.request_id, e.author, e.body, e.data, e.at
			FROM {p}sessions s
			LEFT JOIN {p}events e ON e.session_id = s.id AND s.user_id = $3 AND e.request_id = $4
			WHERE s.app = $1 AND s.conversation = $2
			ORDER BY e.idx`),
		deleteSession: d.Query(`DELETE FROM {p}sessions WHERE app = $1 AND conversation = $2 AND user_id = $3 RETURNING id`),
		deleteEvents:  d.Query(`DELETE FROM {p}events WHERE session_id = $1`),
		deleteUser:    d.Query(`DELETE FROM {p}sessions WHERE app = $1 AND user_id = $2 RETURNING id`),
		countUserEvents: d.Query(`SELECT COUNT(*) FROM {p}events WHERE session_id IN (
			SELECT id FROM {p}sessions WHERE app = $1 AND user_id = $2)`),
		// A bounded batch; the outer condition is checked again on a row a concurrent turn
		// updated (PostgreSQL re-reads it), so a session that became active is kept.
		deleteIdle: d.Query(`DELETE FROM {p}sessions WHERE app = $1 AND updated_at < $2 AND id IN (
				SELECT id FROM {p}sessions WHERE app = $1 AND updated_at < $2 ORDER BY updated_at LIMIT $3)
			RETURNING id`),
		deleteEventsOf: func(n int) string {
			q := []byte(`DELETE FROM {p}events WHERE session_id IN (`)
			for i := range n {
				if i > 0 {
					q = append(q, ", "...)
				}
				q = append(q, '$')
				q = strconv.AppendInt(q, int64(i+1), 10)
			}
			return d.Query(string(append(q, ')')))
		},
		insertEvents: func(n int) string {
			q := []byte(`INSERT INTO {p}events (session_id, seq, request_id, idx, event_id, author, body, data, at) VALUES `)
			for i := range n {
				if i > 0 {
					q = append(q, ", "...)
				}
				q = append(q, '(')
				for c := range eventCols {
					if c > 0 {
						q = append(q, ", "...)
					}
					q = append(q, '$')
					q = strconv.AppendInt(q, int64(i*eventCols+c+1), 10)
				}
				q = append(q, ')')
			}
			return d.Query(string(q))
		},
	}
}
