// Package pgdb gives a benchmark a fresh PostgreSQL database per run, so that no run pays for
// the bloat or the caches another left behind.
package pgdb

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"github.com/jackc/pgx/v5"
)

// Create creates the database name on the server of pgURL and answers its URL and a function
// that drops it.
func Create(ctx context.Context, pgURL, name string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", Redact(pgURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		conn, err := pgx.Connect(context.Background(), pgURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
		}
	}
	return u.String(), drop, nil
}

// Redact answers a database URL without its password, for messages.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "the --db URL"
	}
	return u.Redacted()
}
