// Package sqldialect holds what differs between the SQL databases that turnstile's stores run
// on, PostgreSQL and SQLite, so that session/sqlsession and inbox/sqlinbox have one code path:
// query text (placeholders, table prefix), column types in migrations, the write transaction
// (a plain transaction on PostgreSQL, BEGIN IMMEDIATE on SQLite), time encoding, the
// versioned migration runner, and the classification of errors into retryable infrastructure
// failures and the rest.
//
// Queries are written once, in PostgreSQL's form: "$1".."$N" placeholders and "{p}" where the
// table prefix goes. Dialect.Query rewrites them for the database at hand (SQLite reads
// "?NNN", a numbered placeholder with the same meaning). Both databases accept the upsert
// form INSERT ... ON CONFLICT (...) DO UPDATE/NOTHING ... RETURNING (SQLite since 3.35).
package sqldialect
