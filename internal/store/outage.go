package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// OutageRetry is how long a caller is told to wait after an outage of the
// state database: about what a PostgreSQL restart or a fail-over takes.
const OutageRetry = 5 * time.Second

// OutageError is a call that failed because the state database could not
// be reached (PostgreSQL restarting, the network to it cut), not because of
// what was asked: the same call is worth making again shortly. A write cut
// at its commit may or may not have been applied; every write of the store
// is a whole-record put or a delete, so making it again is safe.
type OutageError struct{ Err error }

func (e *OutageError) Error() string {
	return "the state database is out of reach (" + e.Err.Error() + "); try again shortly"
}

func (e *OutageError) Unwrap() error { return e.Err }

// Outage says how long to wait before trying again. Transports read it
// through this method, so they need not know the store.
func (e *OutageError) Outage() time.Duration { return OutageRetry }

// outage returns err as an *OutageError when it says the PostgreSQL server
// could not be reached, and err itself otherwise (nil stays nil). SQLite
// is a file of this host: its failures are never outages.
func (s *Store) outage(err error) error {
	if err == nil || s.dialect != "postgres" || !unreachable(err) {
		return err
	}
	var already *OutageError
	if errors.As(err, &already) {
		return err
	}
	return &OutageError{Err: err}
}

// unreachable reports whether err is a lost or refused connection to the
// database server, or the server saying it is shutting down or starting.
func unreachable(err error) bool {
	var connect *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.As(err, &connect), errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: the server is
		// shutting down, crashed, or not accepting connections yet.
		return strings.HasPrefix(pgErr.Code, "08") || (strings.HasPrefix(pgErr.Code, "57P") && pgErr.Code != "57P04")
	}
	return false
}
